package fleet_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/fleet"
	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
)

// testFleet is a fleet over real PostgreSQL and an in-process NATS, its
// metrics registry, and what runs it.
type testFleet struct {
	*fleet.Fleet
	reg *prometheus.Registry
	// ended receives Run's result once it returns; stop cancels Run and
	// waits for it.
	ended chan error
	stop  func() error
}

// startFleet runs a fleet over dbs with a NATS sink until the test ends;
// its outboxes are prepared by checking their schema's version, and tweak
// changes the configuration.
func startFleet(t *testing.T, srv *natstest.Server, dbs []fleet.Database, tweak func(*fleet.Config)) *testFleet {
	t.Helper()
	sink, err := natssink.New(natssink.Config{URL: srv.URL(), JetStream: true, AckTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := fleet.Config{
		Databases:     dbs,
		Relay:         relay.Config{Sinks: map[string]sinks.Sink{"nats": sink}, PollInterval: 20 * time.Millisecond, IdlePollInterval: 200 * time.Millisecond},
		Registerer:    reg,
		Labelled:      true,
		DiscoverEvery: 200 * time.Millisecond,
		OpenPool: func(ctx context.Context, url string, maxConns int32, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
			pc, err := pgxpool.ParseConfig(url)
			if err != nil {
				return nil, err
			}
			pc.MaxConns = maxConns
			pc.ConnConfig.Tracer = tracer
			return pgxpool.NewWithConfig(ctx, pc)
		},
		WaitDatabase: func(ctx context.Context, pool *pgxpool.Pool, _ *slog.Logger) error { return pool.Ping(ctx) },
		Prepare: func(ctx context.Context, pool *pgxpool.Pool, schema string, _ *slog.Logger) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			return migrations.Check(ctx, conn.Conn(), schema)
		},
		Logger: log,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	f := fleet.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	var result error
	finished := make(chan struct{})
	go func() {
		result = f.Run(ctx)
		close(finished)
		ended <- result
	}()
	stop := func() error {
		cancel()
		<-finished
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return &testFleet{Fleet: f, reg: reg, ended: ended, stop: stop}
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// delivered is the outbox's outbox_relay_messages_total{outcome=delivered}.
func (f *testFleet) delivered(t *testing.T, schema string) float64 {
	t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, fam := range families {
		if fam.GetName() != "outbox_relay_messages_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["schema"] == schema && labels["outcome"] == "delivered" {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// Two listed schemas and one found by a pattern are served, each counted
// under its own schema label; a schema created while the fleet runs is
// found, and one dropped is let go with its series.
func TestFleet_ListedAndMatchedSchemasComeAndGo(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	a, b := dbtest.New(t), dbtest.New(t)
	// A pattern that matches only this test's schemas: their names end in
	// a random suffix, and the found ones are made under it.
	found := dbtest.New(t)
	pattern := strings.ReplaceAll(found.Name, "_", `\_`)
	f := startFleet(t, srv, []fleet.Database{{URL: a.URL, Schemas: []string{a.Name, b.Name}, Match: pattern + "%"}}, nil)

	relaytest.InsertRows(t, a, 20, "events.a")
	relaytest.InsertRows(t, b, 30, "events.b")
	relaytest.InsertRows(t, found, 40, "events.found")
	for _, db := range []*dbtest.Schema{a, b, found} {
		relaytest.WaitDrained(t, db, 30*time.Second)
	}
	waitfor.Count(t, 10*time.Second, "delivered in each schema", func() float64 {
		return f.delivered(t, a.Name) + f.delivered(t, b.Name) + f.delivered(t, found.Name)
	}, 90)
	if got := []float64{f.delivered(t, a.Name), f.delivered(t, b.Name), f.delivered(t, found.Name)}; got[0] != 20 || got[1] != 30 || got[2] != 40 {
		t.Errorf("delivered by schema %v, want [20 30 40]", got)
	}
	if n := srv.Count(t, "EVENTS"); n != 90 {
		t.Errorf("stream holds %d messages, want 90", n)
	}
	for db, want := range map[*dbtest.Schema]int{a: 20, b: 30, found: 40} {
		if n := db.Count(t, "archive"); n != want {
			t.Errorf("%s.archive holds %d rows, want %d: each outbox's rows settled in its own schema", db.Name, n, want)
		}
	}

	// A schema whose name matches but holds no outbox is not served; once
	// migrated it is.
	late := found.Name + "_late"
	found.Exec(t, "CREATE SCHEMA "+late)
	t.Cleanup(func() { found.Exec(t, "DROP SCHEMA IF EXISTS "+late+" CASCADE") })
	time.Sleep(600 * time.Millisecond) // three searches
	if served := f.Served(); contains(served, late) {
		t.Fatalf("served %v: an empty schema is no outbox", served)
	}
	conn := found.Conn(t)
	if _, err := migrations.Apply(context.Background(), conn, late); err != nil {
		t.Fatal(err)
	}
	found.Exec(t, "INSERT INTO "+late+".messages (topic, payload) VALUES ('events.late', 'late')")
	waitfor.Count(t, 10*time.Second, "rows delivered from the schema created while running", func() float64 { return f.delivered(t, late) }, 1)

	// Dropped: let go, its series leave the registry; the others go on.
	// The drop may deadlock with a claim, which locks messages_all before
	// the generations' tables (the hot table rotates, migration 24), where
	// DROP SCHEMA locks them in its own order: PostgreSQL aborts one of the
	// two, and an operator whose drop it aborted runs it again, as here.
	for attempt := 1; ; attempt++ {
		_, err := found.Pool.Exec(context.Background(), "DROP SCHEMA "+late+" CASCADE")
		var pgErr *pgconn.PgError
		if err == nil {
			break
		}
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" || attempt == 5 {
			t.Fatalf("drop schema %s: %v", late, err)
		}
	}
	waitfor.Condition(t, 10*time.Second, "dropped schema let go", func() bool { return !contains(f.Served(), late) })
	if n, err := testutil.GatherAndCount(f.reg, "outbox_relay_messages_total"); err != nil || n == 0 {
		t.Fatalf("messages series: %d, %v", n, err)
	}
	families, _ := f.reg.Gather()
	for _, fam := range families {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "schema" && l.GetValue() == late {
					t.Fatalf("%s still has a series of the dropped schema", fam.GetName())
				}
			}
		}
	}
	relaytest.InsertRows(t, a, 5, "events.a")
	relaytest.WaitDrained(t, a, 30*time.Second)
	if err := f.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// An outbox that cannot be prepared is retried on its own while the others
// deliver; /readyz names it when every outbox must be ready, and is ready
// with any. Without FailFast, Run does not end on it.
func TestFleet_AFailingOutboxIsRetriedAloneAndNamedByReady(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	good := dbtest.New(t)
	missing := good.Name + "_missing" // never created
	for _, any := range []bool{false, true} {
		f := startFleet(t, srv, []fleet.Database{{Tenant: "acme", URL: good.URL, Schemas: []string{good.Name, missing}}},
			func(c *fleet.Config) { c.ReadyWhenAny = any })
		relaytest.InsertRows(t, good, 10, "events.good")
		relaytest.WaitDrained(t, good, 30*time.Second)
		err := f.Ready(context.Background())
		switch {
		case any && err != nil:
			t.Errorf("ReadyWhenAny: %v, want ready while one outbox is", err)
		case !any && (err == nil || !strings.Contains(err.Error(), "1 of 2 outboxes") || !strings.Contains(err.Error(), "tenant acme schema "+missing)):
			t.Errorf("Ready: %v, want it to name tenant acme schema %s", err, missing)
		}
		if err := f.stop(); err != nil {
			t.Errorf("Run: %v, want nil: a failing outbox does not end the fleet", err)
		}
	}
}

// With FailFast (one listed outbox, as the relay runs with RELAY_SCHEMA),
// an outbox that cannot be prepared ends Run with its error.
func TestFleet_FailFastEndsRunWithTheOutboxError(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	db := dbtest.New(t)
	f := startFleet(t, srv, []fleet.Database{{URL: db.URL, Schemas: []string{db.Name + "_missing"}}},
		func(c *fleet.Config) { c.FailFast, c.Labelled = true, false })
	select {
	case err := <-f.ended:
		if err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v, want the schema check's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
