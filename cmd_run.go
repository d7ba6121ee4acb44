package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// poolSize covers the relay's claimer, settlers and background queries.
const poolSize = 6

func cmdRun(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "Run the relay until SIGTERM or SIGINT (the default command).", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(environ)
	if err != nil {
		return err
	}
	if err := c.requireDatabase(); err != nil {
		return err
	}
	if err := c.requireSinks(); err != nil {
		return usageError{err}
	}
	log := newLogger(c, stderr)
	log.Info("starting outbox-relay", "version", version, "schema", c.Schema)

	pool, err := openPool(ctx, c, poolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := waitForDatabase(ctx, pool, log); err != nil {
		return err
	}
	if c.Migrate {
		n, err := applyMigrations(ctx, pool, c.Schema)
		if err != nil {
			return err
		}
		if n > 0 {
			log.Info("migrations applied", "schema", c.Schema, "num_applied", n)
		}
	} else if err := checkSchema(ctx, pool, c.Schema); err != nil {
		return err
	}

	sinkMap, closeSinks, err := openSinks(ctx, c, log)
	if err != nil {
		return err
	}
	defer closeSinks()

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := relay.NewMetrics()
	if err := metrics.Register(registry); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if s, ok := sinkMap["nats"].(*natssink.Sink); ok && c.NatsJetStream {
		problems := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_jetstream_problem",
			Help: "1 when the start-up check found a problem: no_stream (no stream captures NATS_SUBJECT_PREFIX>) or short_dedup_window (the stream's duplicate window is shorter than RELAY_LEASE + RELAY_BACKOFF_MAX).",
		}, []string{"problem"})
		registry.MustRegister(problems)
		go checkJetStream(ctx, s, c, problems, log)
	}
	r, err := relay.New(pool, relay.Config{
		Schema:            c.Schema,
		ID:                c.ID,
		Sinks:             sinkMap,
		DefaultSink:       c.Sink,
		BatchSize:         c.BatchSize,
		MaxInFlight:       c.MaxInFlight,
		PollInterval:      c.PollInterval,
		Lease:             c.Lease,
		MaxAttempts:       c.MaxAttempts,
		BackoffMin:        c.BackoffMin,
		BackoffMax:        c.BackoffMax,
		DrainTimeout:      c.DrainTimeout,
		ArchiveRetention:  forever(c.ArchiveRetention),
		DedupRetention:    forever(c.DedupRetention),
		CloudEventsSource: c.CloudEvents,
		Logger:            log,
		Metrics:           metrics,
	})
	if err != nil {
		return err
	}

	if c.HTTPAddr != "" {
		stopHTTP, err := serveHTTP(c.HTTPAddr, relay.Handler(r, registry), log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	return r.Run(ctx)
}

// checkJetStream warns when no stream captures the relay's subjects, or when
// the capturing stream's duplicate window is too short to drop a message
// that is re-sent after a lease expiry or the longest retry delay. It runs in
// the background: it waits for NATS without holding up the start.
func checkJetStream(ctx context.Context, s *natssink.Sink, c config, problems *prometheus.GaugeVec, log *slog.Logger) {
	problems.WithLabelValues("no_stream").Set(0)
	problems.WithLabelValues("short_dedup_window").Set(0)
	if c.NatsSubjectPrefix == "" {
		log.Info("NATS_SUBJECT_PREFIX is empty, so the start-up check cannot tell which stream captures the topics; publishes to a subject no stream captures are retried and logged")
		return
	}
	subject := c.NatsSubjectPrefix + ">"
	check, err := s.CheckStream(ctx, subject)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("JetStream check failed", "subject", subject, "err", err)
		}
		return
	}
	if check.Stream == "" {
		problems.WithLabelValues("no_stream").Set(1)
		log.Warn("no JetStream stream captures the relay's subjects: every publish will fail and be retried until one does",
			"subject", subject)
		return
	}
	if need := c.Lease + c.BackoffMax; check.Duplicates < need {
		problems.WithLabelValues("short_dedup_window").Set(1)
		log.Warn("the stream's duplicate window is shorter than RELAY_LEASE + RELAY_BACKOFF_MAX: a message re-sent after a lease expiry or a long retry delay may be stored twice; raise the stream's duplicate window or lower RELAY_BACKOFF_MAX, and let consumers dedupe by Nats-Msg-Id",
			"stream", check.Stream, "duplicate_window", check.Duplicates, "lease_plus_backoff_max", need)
		return
	}
	log.Info("JetStream stream captures the relay's subjects", "stream", check.Stream, "subject", subject, "duplicate_window", check.Duplicates)
}

// forever maps the environment's 0 (keep forever) to the relay's negative.
func forever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// openSinks connects every configured sink.
func openSinks(ctx context.Context, c config, log *slog.Logger) (map[string]sinks.Sink, func(), error) {
	m := map[string]sinks.Sink{}
	var closers []func() error
	closeAll := func() {
		for _, f := range closers {
			_ = f()
		}
	}
	if c.NatsURL != "" {
		s, err := natssink.New(natssink.Config{
			URL:           c.NatsURL,
			JetStream:     c.NatsJetStream,
			SubjectPrefix: c.NatsSubjectPrefix,
			AckTimeout:    c.NatsAckTimeout,
			MaxPending:    2 * max(c.MaxInFlight, 4*c.BatchSize),
			ClientName:    "outbox-relay",
			Logger:        log,
		})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		m["nats"] = s
		closers = append(closers, s.Close)
		if c.NatsStream != "" {
			// A window that covers a lease and the longest retry delay, so
			// that the start-up check is satisfied with the stream it made.
			window := max(2*time.Minute, c.Lease+c.BackoffMax)
			if err := s.EnsureStream(ctx, c.NatsStream, c.NatsSubjectPrefix, window); err != nil {
				closeAll()
				return nil, nil, err
			}
		}
	}
	if c.WebhookURL != "" {
		secrets, err := webhook.ParseSecrets(c.WebhookSecret)
		if err != nil { // validated by loadConfig
			closeAll()
			return nil, nil, &configError{Var: "WEBHOOK_SECRET", Value: "(not shown: secret)", Reason: err.Error()}
		}
		s, err := webhook.New(webhook.Config{
			URL:           c.WebhookURL,
			Secrets:       secrets,
			Timeout:       c.WebhookTimeout,
			Concurrency:   c.WebhookConcurrency,
			MaxRetryAfter: c.WebhookMaxRetryAfter,
			UserAgent:     "outbox-relay/" + version,
			Logger:        log,
		})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		m["webhook"] = s
		closers = append(closers, s.Close)
	}
	return m, closeAll, nil
}

// serveHTTP serves h on addr until the returned stop function is called.
func serveHTTP(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &configError{Var: "RELAY_HTTP_ADDR", Value: addr, Reason: err.Error()}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Info("serving /metrics, /livez and /readyz", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http endpoint stopped", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
