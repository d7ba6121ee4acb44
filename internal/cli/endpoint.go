package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outbox-relay/outbox-relay/relay/console"
)

// endpoint serves /metrics, /livez and /readyz on RELAY_HTTP_ADDR. It
// listens before anything else happens, so that a port conflict is found
// before the schema is touched and /livez answers while the relay still
// waits for its database; /readyz says what the relay is waiting for until
// the relay takes over the answer. /livez fails only when a relay is stuck
// (setLive): waiting for a database or a broker is not a reason to restart.
// It has no authentication: what bounds what a client can make it hold is
// endpointLimits.
type endpoint struct {
	ln     *connLimit
	limits endpointLimits
	srv    *http.Server
	ready  atomic.Pointer[func(context.Context) error]
	live   atomic.Pointer[func() error]
	// console, when set before serve, is served under /console/
	// (RELAY_CONSOLE).
	console http.Handler
}

// The endpoint's bounds by default (docs/security.md, Endpoints, lists
// them). With them, the endpoint holds at most 256 connections, each for at
// most a minute without a request, and its memory stays within a few MiB
// whatever clients do.
const (
	// endpointMaxConnsDefault is RELAY_HTTP_MAX_CONNECTIONS's default.
	endpointMaxConnsDefault = 256
	// endpointReadHeaderTimeoutDefault is how long a request's headers may
	// take to arrive, from the connection's opening or from the end of its
	// previous response.
	endpointReadHeaderTimeoutDefault = 5 * time.Second
	// endpointReadTimeoutDefault bounds the reading of a whole request.
	endpointReadTimeoutDefault = 10 * time.Second
	// endpointWriteTimeoutDefault bounds a response, from the end of its
	// request's headers.
	endpointWriteTimeoutDefault = 30 * time.Second
	// endpointIdleTimeoutDefault is how long a keep-alive connection may
	// wait for its next request.
	endpointIdleTimeoutDefault = 60 * time.Second
	// endpointMaxHeaderBytesDefault bounds a request's headers (probes and
	// scrapers send well under 1 KiB).
	endpointMaxHeaderBytesDefault = 16 << 10
)

// endpointLimits bound the endpoint's connections and how long each is
// held; a zero field takes its default (endpoint*Default).
type endpointLimits struct {
	// MaxConns is the most connections open at once
	// (RELAY_HTTP_MAX_CONNECTIONS), see connLimit.
	MaxConns int
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are
	// the http.Server's.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
}

func (l endpointLimits) withDefaults() endpointLimits {
	return endpointLimits{
		MaxConns:          cmp.Or(l.MaxConns, endpointMaxConnsDefault),
		ReadHeaderTimeout: cmp.Or(l.ReadHeaderTimeout, endpointReadHeaderTimeoutDefault),
		ReadTimeout:       cmp.Or(l.ReadTimeout, endpointReadTimeoutDefault),
		WriteTimeout:      cmp.Or(l.WriteTimeout, endpointWriteTimeoutDefault),
		IdleTimeout:       cmp.Or(l.IdleTimeout, endpointIdleTimeoutDefault),
		MaxHeaderBytes:    cmp.Or(l.MaxHeaderBytes, endpointMaxHeaderBytesDefault),
	}
}

// listen binds addr. An address already in use is said so, naming
// RELAY_HTTP_ADDR (the setting is fine, the port is taken); any other
// failure is a configError naming it.
func listen(addr string, limits endpointLimits) (*endpoint, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("cannot listen on %s (RELAY_HTTP_ADDR): the address is already in use, by another relay or another program; stop it, or set RELAY_HTTP_ADDR to a free address", addr)
	}
	if err != nil {
		return nil, &configError{Var: "RELAY_HTTP_ADDR", Value: addr, Reason: err.Error()}
	}
	limits = limits.withDefaults()
	e := &endpoint{ln: newConnLimit(ln, limits.MaxConns), limits: limits}
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

// setLive makes /livez answer with f: 200 while it returns nil, 503 with
// its error otherwise. Until it is called, /livez answers 200.
func (e *endpoint) setLive(f func() error) {
	e.live.Store(&f)
}

// addr is the address the endpoint listens on.
func (e *endpoint) addr() net.Addr {
	return e.ln.Addr()
}

// serve answers requests in the background until stop.
func (e *endpoint) serve(gatherer prometheus.Gatherer, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		if live := e.live.Load(); live != nil {
			if err := (*live)(); err != nil {
				http.Error(w, "not live: "+readinessText(err), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		if err := (*e.ready.Load())(req.Context()); err != nil {
			http.Error(w, "not ready: "+readinessText(err), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if e.console != nil {
		mux.Handle(console.PrefixDefault+"/", e.console)
	}
	e.ln.full = e.logAtCap(log)
	e.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: e.limits.ReadHeaderTimeout,
		ReadTimeout:       e.limits.ReadTimeout,
		WriteTimeout:      e.limits.WriteTimeout,
		IdleTimeout:       e.limits.IdleTimeout,
		MaxHeaderBytes:    e.limits.MaxHeaderBytes,
		ConnState:         e.ln.track,
		// What net/http reports (an accept error, a handler's panic) goes
		// to the relay's log, in its format.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("serving /metrics, /livez and /readyz", "addr", e.addr().String(), "max_connections", e.limits.MaxConns)
	go func() {
		if err := e.srv.Serve(e.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http endpoint stopped", "err", err)
		}
	}()
}

// capLogEvery is how often, at most, the endpoint says that it is at its
// connection cap.
const capLogEvery = time.Minute

// logAtCap returns the connLimit's full hook: a warning at most every
// capLogEvery, counting the connections closed since the last one. Only
// the server's accept loop calls it.
func (e *endpoint) logAtCap(log *slog.Logger) func(replaced bool) {
	var next time.Time
	var replaced, refused int
	return func(r bool) {
		if r {
			replaced++
		} else {
			refused++
		}
		if now := time.Now(); now.After(next) {
			next = now.Add(capLogEvery)
			log.Warn("the HTTP endpoint is at its connection cap: a new connection closes the one that has waited longest without a request, or is closed while every one is in a request",
				"variable", "RELAY_HTTP_MAX_CONNECTIONS", "max_connections", e.limits.MaxConns, "num_replaced", replaced, "num_refused", refused)
			replaced, refused = 0, 0
		}
	}
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

// kubernetesVariable is set in every container Kubernetes starts.
const kubernetesVariable = "KUBERNETES_SERVICE_HOST"

// warnExposedEndpoint says, at warn, that the endpoint has no
// authentication when it listens on addr beyond loopback outside
// Kubernetes (kubernetesVariable unset in environ): anyone who reaches the
// port reads the metrics and the readiness. In Kubernetes the probes and
// Prometheus reach the pod's address, so the endpoint must listen there; a
// NetworkPolicy restricts who may (docs/kubernetes.md).
func warnExposedEndpoint(log *slog.Logger, addr net.Addr, environ []string) {
	if tcp, ok := addr.(*net.TCPAddr); !ok || tcp.IP.IsLoopback() {
		return
	}
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, kubernetesVariable+"="); ok && v != "" {
			return
		}
	}
	log.Warn("the HTTP endpoint listens beyond loopback and has no authentication: whoever reaches the port reads /metrics and /readyz; "+
		"bind it to a loopback or private address, like RELAY_HTTP_ADDR=127.0.0.1:8461, or firewall the port (docs/security.md, Endpoints)",
		"variable", "RELAY_HTTP_ADDR", "addr", addr.String())
}
