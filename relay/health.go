package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyTimeout bounds the database ping of a readiness check.
const readyTimeout = 2 * time.Second

// errDraining is the readiness of a relay that is shutting down.
var errDraining = errors.New("draining: shutting down")

// Ready reports whether the relay can do its work: it is not draining, the
// database answers and every sink is connected.
func (r *Relay) Ready(ctx context.Context) error {
	if r.draining.Load() {
		return errDraining
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := r.pool.Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	for name, s := range r.cfg.Sinks {
		if a, ok := s.(availability); ok {
			if err := a.Available(); err != nil {
				return fmt.Errorf("sink %s: %w", name, err)
			}
		}
	}
	return nil
}

// Handler serves /metrics from gatherer, /livez (the process answers) and
// /readyz (Ready).
func Handler(r *Relay, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		if err := r.Ready(req.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
