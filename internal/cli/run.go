package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/internal/fleet"
	"github.com/outbox-relay/outbox-relay/internal/gctune"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/console"
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
	if s.Outboxes, err = outboxSettingsOf(&c, inv.Environ); err != nil {
		return err
	}
	databases := s.Outboxes.Databases
	log := newLogger(s, inv.Stderr)
	gctune.Apply(inv.Environ, log)
	log.Info("starting outbox-relay", "version", inv.Version, "outboxes", describeOutboxes(databases), "mode", c.mode())
	for _, u := range unknownVariables(inv.Environ) {
		log.Warn("unknown variable ignored: a typo?", "variable", u.Name, "did_you_mean", u.Closest)
	}
	for _, d := range databases {
		warnPlaintextDatabase(log, d.URL)
	}

	registry := prometheus.NewRegistry()
	problems, err := registerProcessMetrics(registry)
	if err != nil {
		return err
	}

	var ep *endpoint
	if s.HTTPAddr != "" {
		if ep, err = listen(s.HTTPAddr, endpointLimits{MaxConns: s.HTTPMaxConnections}); err != nil {
			return err
		}
		defer ep.stop()
		if s.Console {
			ts, err := c.tenants(inv.Environ)
			if err != nil {
				return err
			}
			lister := newConsoleOutboxes(ts)
			defer lister.close()
			if ep.console, err = newConsole(&c, lister, "the relay (RELAY_CONSOLE)", log); err != nil {
				return err
			}
			log.Info("serving the console", "path", console.PrefixDefault+"/", "actions", s.ConsoleSecret != "")
			warnExposedConsole(log, ep.addr(), "RELAY_HTTP_ADDR")
		}
		ep.serve(registry, log)
		warnExposedEndpoint(log, ep.addr(), inv.Environ)
		ep.starting("starting: waiting for the database")
	}

	opened, closeSinks, err := openSinks(&c, s, log)
	if err != nil {
		return err
	}
	defer closeSinks()
	// The start-up checks end with the command, before the sinks close
	// (deferred after closeSinks, so run first).
	checks, stopChecks := context.WithCancel(ctx)
	var checking sync.WaitGroup
	defer checking.Wait()
	defer stopChecks()
	for name, sink := range opened {
		if checker, ok := sink.(sinks.StartupChecker); ok {
			checking.Go(func() { checkStartup(checks, name, checker, problems, log) })
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
	rc.Sinks, rc.Logger = opened, log
	if tp != nil {
		rc.TracerProvider = tp
	}
	f := fleet.New(fleet.Config{
		Databases:     databases,
		Relay:         rc,
		Registerer:    registry,
		Labelled:      s.Outboxes.Labelled,
		DiscoverEvery: s.Outboxes.DiscoverEvery,
		ReadyWhenAny:  s.Outboxes.ReadyWhenAny,
		FailFast:      !s.Outboxes.Labelled,
		OpenPool:      openPool,
		WaitDatabase:  waitForDatabase,
		Prepare: func(ctx context.Context, pool *pgxpool.Pool, schema string, log *slog.Logger) error {
			return prepareSchema(ctx, pool, schema, s.Migrate, s.Relay.MaxPayloadBytes, log)
		},
		Logger: log,
	})
	if ep != nil {
		ep.setReady(f.Ready)
		ep.setLive(f.Live)
	}
	err = f.Run(ctx)
	var conflict *relay.ModeConflictError
	if errors.As(err, &conflict) {
		name, value := "RELAY_MODE", string(c.mode())
		if c.Mode == "" {
			name, value = "RELAY_ORDERED", strconv.FormatBool(c.Ordered)
		}
		return &configError{Var: name, Value: value, Reason: conflict.Error(),
			Allowed: "the mode of the relays already running on RELAY_SCHEMA"}
	}
	var sinkConflict *relay.SinkConflictError
	if errors.As(err, &sinkConflict) {
		return &configError{Var: "RELAY_SINK", Value: sinkConflict.Want, Reason: sinkConflict.Error(),
			Allowed: "the default sink of the relays already running on RELAY_SCHEMA"}
	}
	return err
}

// prepareSchema readies an outbox's schema for its relay: with migrate
// (RELAY_MIGRATE=true) it applies the pending migrations, else it checks
// the schema's version.
func prepareSchema(ctx context.Context, pool *pgxpool.Pool, schema string, migrate bool, payloadLimit int64, log *slog.Logger) error {
	if !migrate {
		return checkSchema(ctx, pool, schema)
	}
	n, err := applyMigrations(ctx, pool, schema, payloadLimit)
	if permissionDenied(err) {
		return fmt.Errorf("apply the migrations at start (RELAY_MIGRATE=true): %w: this database user may not create or change schema %s. "+
			"Run the relay with RELAY_MIGRATE=false, and have the schema's owner apply the migrations (at install and at every upgrade) with `outbox-relay migrate`, "+
			"or `outbox-relay migrate --print` and your migration tool; the grants the relay needs are in migrations/least_privilege.sql (docs/security.md, Least privilege)", err, schema)
	}
	if err != nil {
		return err
	}
	if n > 0 {
		log.Info("migrations applied", "num_applied", n)
	}
	return nil
}

// registerProcessMetrics registers what /metrics serves once per process
// on reg: the Go runtime's and the process's collectors, and the gauge of
// the sinks' start-up checks, which it returns. Each outbox's relay
// metrics are registered by package fleet. The alerting rules and the
// dashboard under deploy/ are checked against these names.
func registerProcessMetrics(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	problems := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_relay_sink_problem",
		Help: sinkProblemHelp(),
	}, []string{"sink", "problem"})
	if err := reg.Register(problems); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return problems, nil
}

// sinkProblemHelp is outbox_relay_sink_problem's help, listing each sink's
// start-up problems.
func sinkProblemHelp() string {
	help := "1 when a sink's start-up check found a problem with the destination's setup, by sink and problem"
	if list := sinkProblems(func(code string) string { return code }); list != "" {
		help += " (" + list + ")"
	}
	return help + "."
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
	for i, k := range sinkKinds {
		cfg, ok := s.Sinks[k.name]
		if !ok {
			continue
		}
		sink, err := c.sinks[i].open(cfg, log)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open sink %s: %w", k.name, err)
		}
		opened[k.name] = sink
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
