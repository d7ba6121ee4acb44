package relay_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

func TestRelay_PartitionedModeDeliversEachKeyInInsertOrderAcrossRelays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flaky, _ := flakySink(b.sink)
	// 40 keys interleaved, 30 rows each, plus unkeyed rows; the idempotency
	// key is the insert sequence. Every third message fails once.
	b.db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, idempotency_key)
SELECT 'events.partitioned', convert_to(i::text, 'UTF8'), CASE WHEN i % 41 = 40 THEN NULL ELSE 'k' || (i % 41) END, i::text
  FROM generate_series(1, 1230) AS i`)
	for i := range 3 {
		cfg := b.config(t)
		cfg.ID = "relay-" + strconv.Itoa(i)
		cfg.Mode = outbox.ModePartitioned
		cfg.Lease = 2 * time.Second
		cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 50*time.Millisecond
		cfg.Sinks = map[string]sinks.Sink{"nats": flaky}
		relaytest.Start(t, b.db.Pool, cfg)
	}
	relaytest.WaitDrained(t, b.db, 60*time.Second)

	last := map[string]int{}
	for _, m := range b.nats.Messages(t, stream) {
		seq, _ := strconv.Atoi(m.Header.Get(nats.MsgIdHdr))
		if seq%41 == 40 {
			continue // unkeyed
		}
		key := "k" + strconv.Itoa(seq%41)
		if seq < last[key] {
			t.Fatalf("key %s: message %d arrived after %d", key, seq, last[key])
		}
		last[key] = seq
	}
	if len(last) != 40 {
		t.Fatalf("saw %d keys, want 40", len(last))
	}
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, 1230)
	var owned int
	if err := b.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.db.Table("buckets")+" WHERE owner IS NOT NULL").Scan(&owned); err != nil {
		t.Fatal(err)
	}
	if owned != 64 {
		t.Errorf("%d buckets owned while three relays run, want 64", owned)
	}
}

func TestRelay_PartitionedModeAFailingOldestRowHoldsUpOnlyItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.Mode = outbox.ModePartitioned
	cfg.Lease = 2 * time.Second
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	relaytest.Start(t, b.db.Pool, cfg)
	// No stream captures nowhere.>: the oldest row of key k fails and waits
	// an hour. Key j and the rows without a key go on; k's other rows are
	// never sent.
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, available_at)
	              SELECT 'nowhere.x', 'x', 'k', now() - interval '1 hour' FROM generate_series(1, 5)`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.j', 'y', 'j' FROM generate_series(1, 5)`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'events.u', 'z' FROM generate_series(1, 5)`)
	waitfor.Condition(t, 20*time.Second, "key j and the unkeyed rows to be delivered", func() bool {
		return b.db.Count(t, "archive") == 10
	})
	waitfor.Condition(t, 20*time.Second, "the oldest row of k to be in backoff", func() bool {
		var n int
		_ = b.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.db.Table("messages")+" WHERE attempts = 1 AND leased_by IS NULL AND available_at > now()").Scan(&n)
		return n == 1
	})
	time.Sleep(500 * time.Millisecond) // claims go on meanwhile
	var first int64
	var tried, untouched int
	err := b.db.Pool.QueryRow(t.Context(), `
SELECT min(id), count(*) FILTER (WHERE attempts > 0), count(*) FILTER (WHERE attempts = 0 AND leased_by IS NULL)
  FROM `+b.db.Table("messages")+` WHERE key = 'k'`).Scan(&first, &tried, &untouched)
	if err != nil {
		t.Fatal(err)
	}
	if tried != 1 || untouched != 4 {
		t.Errorf("key k: %d rows tried and %d untouched, want 1 (its oldest) and 4", tried, untouched)
	}
	if n := b.db.Count(t, "archive"); n != 10 {
		t.Errorf("%d rows archived, want 10", n)
	}
}

// blockingSink delivers nothing until release is closed, then everything;
// started is closed when the first delivery begins.
func blockingSink() (sink *sinktest.Func, started, release chan struct{}, sent *atomic.Int64) {
	started, release = make(chan struct{}), make(chan struct{})
	sent = new(atomic.Int64)
	var once sync.Once
	sink = &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
		once.Do(func() { close(started) })
		select {
		case <-release:
		case <-ctx.Done():
			return sinks.Fill(make([]error, len(msgs)), ctx.Err())
		}
		sent.Add(int64(len(msgs)))
		return make([]error, len(msgs))
	}}
	return sink, started, release, sent
}

func TestRelay_PartitionedModeARelayThatLostItsBucketsSettlesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink, started, release, sent := blockingSink()
	cfg := b.config(t)
	cfg.ID = "relay-a"
	cfg.Mode = outbox.ModePartitioned
	cfg.Lease = 5 * time.Second
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	metrics := cfg.Metrics
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.InsertRows(t, b.db, 20, "events.lost")
	<-started
	waitfor.Condition(t, 10*time.Second, "relay A to have every row in flight", func() bool {
		var n int
		_ = b.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.db.Table("messages")+" WHERE leased_until > now()").Scan(&n)
		return n == 20
	})
	// Another relay takes every bucket while A's deliveries hang, as if A
	// had been paused past its bucket leases.
	b.db.Exec(t, `UPDATE %s.buckets SET owner = 'thief', epoch = epoch + 1, lease_until = now() + interval '1 hour'`)
	close(release)
	waitfor.Condition(t, 10*time.Second, "relay A to find its outcomes fenced off", func() bool {
		return testutil.ToFloat64(metrics.LeaseLost) == 20
	})
	if got := testutil.ToFloat64(metrics.Messages.WithLabelValues("nats", "delivered")); got != 0 {
		t.Errorf("relay A counted %v deliveries settled after losing its buckets, want 0", got)
	}
	if n := b.db.Count(t, "archive"); n != 0 {
		t.Errorf("relay A archived %d rows of buckets it had lost", n)
	}
	if sent.Load() != 20 {
		t.Fatalf("sink got %d messages, want 20", sent.Load())
	}
	waitfor.Condition(t, 10*time.Second, "relay A to notice it lost its buckets", func() bool {
		return testutil.ToFloat64(metrics.BucketChanges.WithLabelValues("lost")) == 64 && testutil.ToFloat64(metrics.BucketsOwned) == 0
	})
	// The thief vanishes: A acquires the buckets again under new epochs
	// and delivers the rows once their leases end.
	b.db.Exec(t, `UPDATE %s.buckets SET owner = NULL, lease_until = now()`)
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	if n := b.db.Count(t, "archive"); n != 20 {
		t.Errorf("%d rows archived, want 20", n)
	}
}

// bucketsOf returns how many buckets each relay holds now.
func bucketsOf(t *testing.T, b *bundle) map[string]int {
	t.Helper()
	rows, err := b.db.Pool.Query(t.Context(), "SELECT coalesce(owner, ''), count(*) FROM "+b.db.Table("buckets")+" WHERE lease_until > now() GROUP BY 1")
	if err != nil {
		t.Fatal(err)
	}
	owners, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		owner string
		n     int
	}, error) {
		var o struct {
			owner string
			n     int
		}
		return o, r.Scan(&o.owner, &o.n)
	})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, o := range owners {
		m[o.owner] = o.n
	}
	return m
}

func TestRelay_PartitionedModeRebalancesAsRelaysComeAndGoMovingFewBuckets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	newConfig := func(id string) relay.Config {
		cfg := b.config(t)
		cfg.ID = id
		cfg.Mode = outbox.ModePartitioned
		cfg.Lease = 2 * time.Second
		return cfg
	}
	a := newConfig("relay-a")
	relaytest.Start(t, b.db.Pool, a)
	waitfor.Condition(t, 10*time.Second, "relay A to hold the 64 buckets", func() bool {
		return maps.Equal(bucketsOf(t, b), map[string]int{"relay-a": 64})
	})
	c := newConfig("relay-c")
	_, stopC := relaytest.Start(t, b.db.Pool, c)
	waitfor.Condition(t, 10*time.Second, "relays A and C to hold 32 each", func() bool {
		return maps.Equal(bucketsOf(t, b), map[string]int{"relay-a": 32, "relay-c": 32})
	})
	if got := testutil.ToFloat64(a.Metrics.BucketChanges.WithLabelValues("released")); got != 32 {
		t.Errorf("relay A released %v buckets when C joined, want exactly its excess, 32", got)
	}
	stopC()
	waitfor.Condition(t, 10*time.Second, "relay A to hold the 64 buckets again", func() bool {
		return maps.Equal(bucketsOf(t, b), map[string]int{"relay-a": 64})
	})
	if got := testutil.ToFloat64(a.Metrics.BucketChanges.WithLabelValues("acquired")); got != 96 {
		t.Errorf("relay A acquired %v buckets in all, want 64 + 32", got)
	}
	if got := testutil.ToFloat64(a.Metrics.BucketsOwned); got != 64 {
		t.Errorf("outbox_relay_buckets_owned = %v, want 64", got)
	}
	relaytest.InsertRows(t, b.db, 100, "events.after")
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, 100)
}

func TestRelay_PartitionedModeARelayFrozenMidRoundDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.ID = "relay-a"
	cfg.Mode = outbox.ModePartitioned
	cfg.Lease = 2 * time.Second
	relaytest.Start(t, b.db.Pool, cfg)
	waitfor.Condition(t, 10*time.Second, "relay A to hold the 64 buckets", func() bool {
		return maps.Equal(bucketsOf(t, b), map[string]int{"relay-a": 64})
	})
	// A second relay's round, frozen after its first statements (SIGSTOP,
	// a VM pause): it holds the schema's bucket lock and a bucket's row.
	frozen := b.db.Conn(t)
	tx, err := frozen.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.LockBucketsRound(t.Context(), tx, b.db.Name, 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "UPDATE "+b.db.Table("buckets")+" SET lease_until = lease_until WHERE bucket = 0"); err != nil {
		t.Fatal(err)
	}
	// Longer than a bucket lease (2.6 s): relay A must keep renewing.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if owners := bucketsOf(t, b); !maps.Equal(owners, map[string]int{"relay-a": 64}) {
			t.Fatalf("while another round was frozen, the buckets' owners became %v, want relay A's 64 renewed", owners)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := tx.Commit(t.Context()); err == nil {
		t.Error("the frozen round's transaction committed; the server should have ended its session")
	}
	relaytest.InsertRows(t, b.db, 50, "events.after")
	relaytest.WaitDrained(t, b.db, 30*time.Second)
}

func TestRelay_KeyedModesClaimAKeysNextRowsWhileItsPreviousRowIsInFlight(t *testing.T) {
	t.Parallel()
	for mode, set := range keyOrderModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			testClaimsAKeysNextRowsWhileItsPreviousRowIsInFlight(t, set)
		})
	}
}

// testClaimsAKeysNextRowsWhileItsPreviousRowIsInFlight writes a key's next
// rows while its first row is in flight in the relay, and fails that row:
// the relay claims the next rows behind it, sends none of them first, and
// in the end delivers the key once, in insert order.
func testClaimsAKeysNextRowsWhileItsPreviousRowIsInFlight(t *testing.T, set func(*relay.Config)) {
	b := setup(t)
	release := make(chan struct{})
	var mu sync.Mutex
	var delivered []int64
	first := true
	sink := &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
		errs := make([]error, len(msgs))
		mu.Lock()
		hold := first
		first = false
		mu.Unlock()
		if hold {
			// The key's oldest row is in flight until release, then
			// fails: the rows claimed behind it must not be sent first.
			<-release
			return sinks.Fill(errs, errors.New("the receiver is down"))
		}
		mu.Lock()
		for _, m := range msgs {
			delivered = append(delivered, m.ID)
		}
		mu.Unlock()
		return errs
	}}
	cfg := b.config(t)
	set(&cfg)
	cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, 50*time.Millisecond
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.k', 'x', 'k')`)
	waitfor.Condition(t, 20*time.Second, "the key's first row to be in flight", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !first
	})
	// The key's next rows, written while its first row is in flight, are
	// claimed behind it.
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.k', 'x', 'k' FROM generate_series(1, 4)`)
	waitfor.Condition(t, 20*time.Second, "the key's next rows to be claimed", func() bool {
		var n int
		_ = b.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.db.Table("messages")+" WHERE leased_by IS NOT NULL").Scan(&n)
		return n == 5
	})
	mu.Lock()
	sent := len(delivered)
	mu.Unlock()
	if sent != 0 {
		t.Fatalf("%d rows sent while the key's oldest row is in flight", sent)
	}
	close(release)
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	var ids []int64
	rows, err := b.db.Pool.Query(t.Context(), "SELECT id FROM "+b.db.Table("archive")+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(delivered, ids) {
		t.Fatalf("delivered %v, want the key's rows once each in insert order %v", delivered, ids)
	}
}

func TestRelay_KeyedModesForgetTheLinksOfSettledRows(t *testing.T) {
	t.Parallel()
	for _, mode := range []outbox.Mode{outbox.ModeOrdered, outbox.ModePartitioned} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config(t)
			cfg.Mode = mode
			b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key)
			              SELECT 'events.k', 'x', 'k' || (i % 50) FROM generate_series(1, 2000) AS i`)
			r, _ := relaytest.Start(t, b.db.Pool, cfg)
			relaytest.WaitDrained(t, b.db, 60*time.Second)
			// The claims that follow (the relay polls) forget the links of
			// the rows settled before them: a relay's memory does not grow
			// with the rows it has delivered.
			waitfor.Condition(t, 20*time.Second, "the links of the delivered rows to be forgotten", func() bool {
				return relay.ChainLinks(r) == 0
			})
		})
	}
}
