package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// endpoint serves /metrics, /livez and /readyz on RELAY_HTTP_ADDR. It
// listens before anything else happens, so that a port conflict is found
// before the schema is touched and /livez answers while the relay still
// waits for its database; /readyz says what the relay is waiting for until
// the relay takes over the answer.
type endpoint struct {
	ln    net.Listener
	srv   *http.Server
	ready atomic.Pointer[func(context.Context) error]
}

// listen binds addr. A failure is a configError naming RELAY_HTTP_ADDR.
func listen(addr string) (*endpoint, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &configError{Var: "RELAY_HTTP_ADDR", Value: addr, Reason: err.Error()}
	}
	e := &endpoint{ln: ln}
	e.starting("starting")
	return e, nil
}

// starting makes /readyz answer 503 with why the relay is not running yet.
func (e *endpoint) starting(phase string) {
	err := errors.New(phase)
	e.setReady(func(context.Context) error { return err })
}

// setReady makes /readyz answer with f.
func (e *endpoint) setReady(f func(context.Context) error) {
	e.ready.Store(&f)
}

// serve answers requests in the background until stop.
func (e *endpoint) serve(gatherer prometheus.Gatherer, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		if err := (*e.ready.Load())(req.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Info("serving /metrics, /livez and /readyz", "addr", e.ln.Addr().String())
	go func() {
		if err := e.srv.Serve(e.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http endpoint stopped", "err", err)
		}
	}()
}

// stop closes the listener and waits briefly for requests in flight.
func (e *endpoint) stop() {
	if e.srv == nil {
		_ = e.ln.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
}
