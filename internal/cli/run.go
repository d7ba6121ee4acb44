package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
)

func cmdRun(ctx context.Context, inv *Invocation, args []string) error {
	fs := newFlagSet("run", "Run the relay until SIGTERM or SIGINT (the default command).", inv.Stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(inv.Environ)
	if err != nil {
		return err
	}
	if err := c.requireDatabase(); err != nil {
		return err
	}
	if err := c.requireSinks(inv.Environ); err != nil {
		return err
	}
	s := settingsOf(&c, inv.Version)
	log := newLogger(s, inv.Stderr)
	log.Info("starting outbox-relay", "version", inv.Version, "schema", s.Relay.Schema, "mode", c.mode())
	for _, u := range unknownVariables(inv.Environ) {
		log.Warn("unknown variable ignored: a typo?", "variable", u.Name, "did_you_mean", u.Closest)
	}
	warnPlaintextDatabase(log, s.DatabaseURL)

	registry := prometheus.NewRegistry()
	metrics, problems, err := registerMetrics(registry)
	if err != nil {
		return err
	}

	var ep *endpoint
	if s.HTTPAddr != "" {
		if ep, err = listen(s.HTTPAddr); err != nil {
			return err
		}
		defer ep.stop()
		ep.serve(registry, log)
		ep.starting("starting: waiting for the database")
	}

	pool, err := openPool(ctx, s.DatabaseURL, relay.PoolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := waitForDatabase(ctx, pool, log); err != nil {
		return err
	}
	if s.Migrate {
		n, err := applyMigrations(ctx, pool, s.Relay.Schema)
		if permissionDenied(err) {
			return fmt.Errorf("apply the migrations at start (RELAY_MIGRATE=true): %w: this database user may not create or change schema %s. "+
				"Run the relay with RELAY_MIGRATE=false, and have the schema's owner apply the migrations (at install and at every upgrade) with `outbox-relay migrate`, "+
				"or `outbox-relay migrate --print` and your migration tool; the grants the relay needs are in migrations/least_privilege.sql (docs/security.md, Least privilege)", err, s.Relay.Schema)
		}
		if err != nil {
			return err
		}
		if n > 0 {
			log.Info("migrations applied", "schema", s.Relay.Schema, "num_applied", n)
		}
	} else if err := checkSchema(ctx, pool, s.Relay.Schema); err != nil {
		return err
	}

	opened, closeSinks, err := openSinks(&c, s, log)
	if err != nil {
		return err
	}
	defer closeSinks()
	for name, sink := range opened {
		if checker, ok := sink.(sinks.StartupChecker); ok {
			go checkStartup(ctx, name, checker, problems, log)
		}
	}

	tp, stopTracing, err := newTracerProvider(ctx, s.Tracing, log)
	if err != nil {
		return err
	}
	// Deferred after the sinks' close, so run first: the last spans are
	// flushed once the relay has drained.
	defer stopTracing()

	rc := s.Relay
	rc.Sinks, rc.Logger, rc.Metrics = opened, log, metrics
	if tp != nil {
		rc.TracerProvider = tp
	}
	r, err := relay.New(pool, rc)
	if err != nil {
		return err
	}
	if ep != nil {
		ep.setReady(r.Ready)
	}
	err = r.Run(ctx)
	var conflict *relay.ModeConflictError
	if errors.As(err, &conflict) {
		name, value := "RELAY_MODE", string(c.mode())
		if c.Mode == "" {
			name, value = "RELAY_ORDERED", strconv.FormatBool(c.Ordered)
		}
		return &configError{Var: name, Value: value, Reason: conflict.Error(),
			Allowed: "the mode of the relays already running on RELAY_SCHEMA"}
	}
	return err
}

// registerMetrics registers everything /metrics serves on reg: the Go
// runtime's and the process's collectors, the relay's, and the gauge of the
// sinks' start-up checks, which it returns with the relay's. The alerting
// rules and the dashboard under deploy/ are checked against these names.
func registerMetrics(reg prometheus.Registerer) (*relay.Metrics, *prometheus.GaugeVec, error) {
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, fmt.Errorf("register metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, fmt.Errorf("register metrics: %w", err)
	}
	metrics := relay.NewMetrics()
	if err := metrics.Register(reg); err != nil {
		return nil, nil, fmt.Errorf("register metrics: %w", err)
	}
	problems := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_relay_sink_problem",
		Help: "1 when a sink's start-up check found a problem with the destination's setup, by sink and problem (nats: no_stream, short_dedup_window; kafka: auth_failed, no_producer_id, no_topics; rabbitmq: no_exchange, auth_failed, vhost_refused, tls_failed).",
	}, []string{"sink", "problem"})
	if err := reg.Register(problems); err != nil {
		return nil, nil, fmt.Errorf("register metrics: %w", err)
	}
	return metrics, problems, nil
}

// openSinks opens every configured sink with its settings. The returned
// function closes those that hold connections.
func openSinks(c *config, s settings, log *slog.Logger) (map[string]sinks.Sink, func(), error) {
	opened := map[string]sinks.Sink{}
	closeAll := func() {
		for _, sink := range opened {
			if cl, ok := sink.(io.Closer); ok {
				_ = cl.Close()
			}
		}
	}
	for _, e := range c.sinkEnvs() {
		cfg, ok := s.Sinks[e.name()]
		if !ok {
			continue
		}
		sink, err := e.open(cfg, log)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open sink %s: %w", e.name(), err)
		}
		opened[e.name()] = sink
	}
	return opened, closeAll, nil
}

// checkStartup runs a sink's start-up check in the background, logging
// what it finds and setting outbox_relay_sink_problem.
func checkStartup(ctx context.Context, name string, checker sinks.StartupChecker, problems *prometheus.GaugeVec, log *slog.Logger) {
	found, err := checker.CheckStartup(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("sink start-up check failed", "sink", name, "err", err)
		}
		return
	}
	for _, p := range found {
		problems.WithLabelValues(name, p.Code).Set(1)
		log.Warn(p.Message, append([]any{"sink", name, "problem", p.Code}, p.Attrs...)...)
	}
}
