package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// runLive runs a relay over pool with cfg and the liveness threshold
// threshold until stop is called or the test ends (relaytest.Run).
func runLive(t *testing.T, pool *pgxpool.Pool, cfg relay.Config, threshold time.Duration) (r *relay.Relay, stop func()) {
	t.Helper()
	r, err := relay.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	relay.SetLivenessThreshold(r, threshold)
	return r, relaytest.Run(t, r)
}

// stayLive fails t unless r stays live, checked at every poll, until
// until holds.
func stayLive(t *testing.T, r *relay.Relay, timeout time.Duration, what string, until func() bool) {
	t.Helper()
	waitfor.Condition(t, timeout, what, func() bool {
		if err := r.Live(); err != nil {
			t.Fatalf("not live while %s: %v", what, err)
		}
		return until()
	})
}

// A claim loop that never comes back from a call (here the sink's
// Available, which the claim loops ask before every claim and which takes
// no context) makes the relay not live, naming the loops and saying so in
// the log; once the call returns, the relay is live again and delivers.
func TestRelay_NotLiveWhileAClaimLoopIsStuck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var stuck atomic.Bool
	unblock := make(chan struct{})
	sink := &sinktest.Func{AvailableFunc: func() error {
		if stuck.Load() {
			<-unblock
		}
		return nil
	}}
	cfg := b.config(t)
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	var logs *testlog.Buffer
	cfg.Logger, logs = testlog.New(t, slog.LevelWarn)
	const threshold = 2 * time.Second
	r, _ := runLive(t, b.db.Pool, cfg, threshold)
	var once sync.Once
	release := func() { once.Do(func() { stuck.Store(false); close(unblock) }) }
	t.Cleanup(release) // before the relay stops

	relaytest.InsertRows(t, b.db, 10, "events.a")
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	if err := r.Live(); err != nil {
		t.Fatalf("Live() = %v while the relay delivers", err)
	}

	stuck.Store(true)
	var err error
	waitfor.Condition(t, 30*time.Second, "the relay to be not live, naming both claim loops", func() bool {
		err = r.Live()
		// The two loops get stuck at their own next turns: wait for both.
		return err != nil && strings.Contains(err.Error(), "claim loop 1") && strings.Contains(err.Error(), "claim loop 2")
	})
	for _, want := range []string{"the relay no longer turns: stuck: ", "claim loop 1 (rows) for ", "claim loop 2 (rows) for ", "the limit is 2s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Live() = %q, want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "settle loop") || strings.Contains(err.Error(), "heartbeat") {
		t.Errorf("Live() = %q names loops that are not stuck", err)
	}
	logs.Wait(t, 10*time.Second, `level=ERROR msg="a loop of the relay is stuck`, `loop="claim loop 1 (rows)"`)

	release()
	waitfor.Condition(t, 30*time.Second, "the relay to be live again", func() bool { return r.Live() == nil })
	relaytest.InsertRows(t, b.db, 10, "events.a")
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	logs.Wait(t, 10*time.Second, `msg="a loop of the relay that was stuck comes round again"`)
}

// heldSink is a sink whose deliveries wait, within their context, until
// released: rows are in flight, and their settles come, when the test says.
type heldSink struct {
	sinktest.Func
	started atomic.Int64
	release chan struct{}
}

func newHeldSink() *heldSink {
	s := &heldSink{release: make(chan struct{})}
	s.DeliverFunc = func(ctx context.Context, msgs []sinks.Message) []error {
		s.started.Add(1)
		select {
		case <-s.release:
			return make([]error, len(msgs))
		case <-ctx.Done():
			return sinks.Fill(make([]error, len(msgs)), ctx.Err())
		}
	}
	return s
}

// A database that stops answering without closing its connections (a
// network partition, a hung proxy) for three times the liveness threshold
// leaves the relay live: claims give up after a quarter of the lease and
// back off, settles give up after the lease, heartbeats after
// heartbeatTimeout. Before heartbeats had a timeout, the heartbeat loop
// hung on such a connection for ever. Once the database answers, the rows
// are delivered.
func TestRelay_LiveWhileTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := b.db.Proxy(t)
	pcfg, err := pgxpool.ParseConfig(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = relay.PoolSize
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the relay stops
	sink := newHeldSink()
	cfg := b.config(t)
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	cfg.Lease = 2 * time.Second
	// Longer than the longest bounded call (a heartbeat, 5 s): the
	// threshold of a real relay is at least two minutes.
	const threshold = 7 * time.Second
	r, _ := runLive(t, pool, cfg, threshold)

	relaytest.InsertRows(t, b.db, 10, "events.a")
	waitfor.Condition(t, 30*time.Second, "deliveries in flight", func() bool { return sink.started.Load() > 0 })
	proxy.Hold()
	close(sink.release) // their settles meet the silent database
	held := time.Now()
	stayLive(t, r, 3*threshold+30*time.Second, "the database does not answer", func() bool { return time.Since(held) > 3*threshold })
	if n := testutil.ToFloat64(cfg.Metrics.ClaimErrors); n == 0 {
		t.Error("no claim failed while the database did not answer")
	}
	if n := testutil.ToFloat64(cfg.Metrics.SettleErrors); n == 0 {
		t.Error("no settle failed while the database did not answer")
	}

	proxy.Resume()
	stayLive(t, r, 60*time.Second, "the relay catches up", func() bool { return b.db.Count(t, "messages_all") == 0 })
}

// Claims and settles waiting on a lock (an operator's LOCK TABLE) for
// three times the liveness threshold leave the relay live: a claim gives
// up after a quarter of the lease, a settle after the lease.
func TestRelay_LiveWhileClaimsAndSettlesWaitOnALock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := newHeldSink()
	cfg := b.config(t)
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	cfg.Lease = 2 * time.Second
	const threshold = 4 * time.Second
	r, _ := runLive(t, b.db.Pool, cfg, threshold)

	relaytest.InsertRows(t, b.db, 10, "events.a")
	waitfor.Condition(t, 30*time.Second, "deliveries in flight", func() bool { return sink.started.Load() > 0 })
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE "+b.db.Table("messages")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	close(sink.release)
	locked := time.Now()
	stayLive(t, r, 3*threshold+30*time.Second, "the table is locked", func() bool { return time.Since(locked) > 3*threshold })
	if n := testutil.ToFloat64(cfg.Metrics.ClaimErrors); n == 0 {
		t.Error("no claim gave up while the table was locked")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	stayLive(t, r, 60*time.Second, "the relay catches up", func() bool { return b.db.Count(t, "messages_all") == 0 })
}

// A drain at shutdown that lasts several thresholds (deliveries that
// take their whole budget) leaves the relay live: the claim loops and the
// heartbeat have ended, the settle loops wait for outcomes.
func TestRelay_LiveDuringALongDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := newHeldSink() // never released: each delivery ends at its deadline
	cfg := b.config(t)
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	cfg.Lease = 10 * time.Second // deliveries end 8 s after their claim
	cfg.DrainTimeout = 10 * time.Second
	const threshold = 2 * time.Second
	r, stop := runLive(t, b.db.Pool, cfg, threshold)

	relaytest.InsertRows(t, b.db, 10, "events.a")
	waitfor.Condition(t, 30*time.Second, "deliveries in flight", func() bool { return sink.started.Load() > 0 })
	var took atomic.Int64
	go func() {
		began := time.Now()
		stop()
		took.Store(int64(time.Since(began)))
	}()
	stayLive(t, r, 60*time.Second, "the relay drains", func() bool { return took.Load() != 0 })
	if d := time.Duration(took.Load()); d < 2*threshold {
		t.Errorf("the drain took %s, not several thresholds (%s): the test proves nothing", d, threshold)
	}
	if err := r.Live(); err != nil {
		t.Errorf("Live() = %v once the relay stopped", err)
	}
}

// A relay draining a backlog as fast as it can stays live with a
// threshold far shorter than a real relay's (two minutes at least): no
// loop goes that long without coming round under load.
func TestRelay_LiveUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20000
	relaytest.InsertRows(t, b.db, n, "events.orders.created")
	cfg := b.config(t)
	cfg.BatchSize = 500
	cfg.MaxInFlight = 4000
	const threshold = 3 * time.Second
	r, _ := runLive(t, b.db.Pool, cfg, threshold)
	stayLive(t, r, relaytest.Budget(n), "the relay drains a backlog", func() bool { return b.db.Count(t, "messages_all") == 0 })
}
