package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// flakySink delivers through next but fails the first delivery of every
// third message (by the sequence in its idempotency key), and records the
// most messages of one key it ever held at once.
func flakySink(next sinks.Sink) (sink *sinktest.Func, maxPerKey func() int) {
	var (
		mu          sync.Mutex
		failed      = map[string]bool{}
		inFlight    = map[string]int{}
		maxInFlight int
	)
	sink = &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
		mu.Lock()
		var send []sinks.Message
		var at []int
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if m.Key != "" {
				inFlight[m.Key]++
				maxInFlight = max(maxInFlight, inFlight[m.Key])
			}
			seq, _ := strconv.Atoi(m.IdempotencyKey)
			if seq%3 == 0 && !failed[m.IdempotencyKey] {
				failed[m.IdempotencyKey] = true
				errs[i] = errors.New("flaky: try again")
				continue
			}
			send = append(send, m)
			at = append(at, i)
		}
		mu.Unlock()
		for j, err := range next.Deliver(ctx, send) {
			errs[at[j]] = err
		}
		mu.Lock()
		for _, m := range msgs {
			if m.Key != "" {
				inFlight[m.Key]--
			}
		}
		mu.Unlock()
		return errs
	}}
	return sink, func() int {
		mu.Lock()
		defer mu.Unlock()
		return maxInFlight
	}
}

// keyOrderModes are the modes that promise per-key order; their tests run
// in each.
var keyOrderModes = map[outbox.Mode]func(*relay.Config){
	outbox.ModeOrdered:     func(c *relay.Config) { c.Mode = outbox.ModeOrdered },
	outbox.ModePartitioned: func(c *relay.Config) { c.Mode = outbox.ModePartitioned },
}

func TestRelay_OrderedModeDeliversEachKeyInInsertOrder(t *testing.T) {
	t.Parallel()
	for mode, set := range keyOrderModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			testDeliversEachKeyInInsertOrder(t, set)
		})
	}
}

func testDeliversEachKeyInInsertOrder(t *testing.T, set func(*relay.Config)) {
	b := setup(t)
	cfg := b.config(t)
	set(&cfg)
	cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 50*time.Millisecond
	flaky, maxPerKey := flakySink(b.sink)
	cfg.Sinks = map[string]sinks.Sink{"nats": flaky}
	// 5 keys interleaved, 100 rows each, plus unkeyed rows; the idempotency
	// key is the insert sequence.
	b.db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, idempotency_key)
SELECT 'events.ordered', convert_to(i::text, 'UTF8'), CASE WHEN i % 6 = 5 THEN NULL ELSE 'k' || (i % 6) END, i::text
  FROM generate_series(1, 600) AS i`)
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.WaitDrained(t, b.db, 60*time.Second)

	last := map[string]int{}
	for _, m := range b.nats.Messages(t, stream) {
		seq, _ := strconv.Atoi(m.Header.Get(nats.MsgIdHdr))
		key := "k" + strconv.Itoa(seq%6)
		if seq%6 == 5 {
			continue // unkeyed
		}
		if seq < last[key] {
			t.Fatalf("key %s: message %d arrived after %d", key, seq, last[key])
		}
		last[key] = seq
	}
	if len(last) != 5 {
		t.Fatalf("saw %d keys, want 5", len(last))
	}
	if n := maxPerKey(); n != 1 {
		t.Errorf("up to %d messages of one key were in flight at once, want 1", n)
	}
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, 600)
}

func TestRelay_OrderedModeAFailingHeadHoldsUpOnlyItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.Mode = outbox.ModeOrdered
	cfg.StatsInterval = 50 * time.Millisecond
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	relaytest.Start(t, b.db.Pool, cfg)
	// No stream captures nowhere.>: the head of key k fails and waits an
	// hour. Key j and the rows without a key go on.
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, available_at)
	              SELECT 'nowhere.x', 'x', 'k', now() - interval '1 hour' FROM generate_series(1, 5)`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.j', 'y', 'j' FROM generate_series(1, 5)`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'events.u', 'z' FROM generate_series(1, 5)`)
	waitfor.Condition(t, 20*time.Second, "key j and the unkeyed rows to be delivered", func() bool {
		return b.db.Count(t, "archive") == 10
	})
	waitfor.Condition(t, 20*time.Second, "the head of k to be in backoff", func() bool {
		var n int
		_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+b.db.Table("messages")+" WHERE attempts = 1 AND leased_by IS NULL AND available_at > now()").Scan(&n)
		return n == 1
	})
	// The rows behind the head were never tried (leased in its run, they
	// were put back without an attempt when it failed): the next claim
	// marks them waiting on their key, out of the claims' way.
	waitfor.Condition(t, 10*time.Second, "the 4 rows behind the head to wait on their key untried", func() bool {
		return b.db.CountWhere(t, "messages_all", "key = 'k' AND attempts = 0 AND available_at < now() AND waiting") == 4
	})
	waitfor.Condition(t, 10*time.Second, "the gauges to show one blocked key with 4 rows waiting on it", func() bool {
		return testutil.ToFloat64(cfg.Metrics.BlockedKeys) == 1 && testutil.ToFloat64(cfg.Metrics.WaitingOnKey) == 4 &&
			testutil.ToFloat64(cfg.Metrics.Backlog.WithLabelValues("nats")) == 0 && testutil.ToFloat64(cfg.Metrics.OldestDueAge) == 0
	})
}

func TestRelay_OrderedModeProducersRacingTheSettlesLoseNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.Mode = outbox.ModeOrdered
	sink := &sinktest.Memory{}
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	relaytest.Start(t, b.db.Pool, cfg)
	// Producers keep writing to a few keys while the relay drains them, so
	// that rows arrive behind heads being settled all the time; each
	// transaction waits a little before committing.
	const producers, perProducer, keys = 6, 150, 5
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				tx, err := b.db.Pool.Begin(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				key := "k" + strconv.Itoa((p+i)%keys)
				_, err = tx.Exec(context.Background(), "INSERT INTO "+b.db.Table("messages")+" (topic, payload, key, idempotency_key) VALUES ('events.a', 'x', $1, $2)",
					key, fmt.Sprintf("%d-%d", p, i))
				if err == nil {
					time.Sleep(time.Duration(i%3) * time.Millisecond)
					err = tx.Commit(context.Background())
				}
				if err != nil {
					t.Error(err)
					_ = tx.Rollback(context.Background())
					return
				}
			}
		})
	}
	wg.Wait()
	relaytest.WaitDrained(t, b.db, relaytest.Budget(producers*perProducer))
	if got := len(sink.Keys()); got != producers*perProducer {
		t.Errorf("the sink got %d messages, want %d", got, producers*perProducer)
	}
	if n := testutil.ToFloat64(cfg.Metrics.LanesRepaired); n != 0 {
		t.Errorf("%v rows had to be repaired: the claims' and the settles' protocol left rows waiting behind nothing", n)
	}
}

func TestRelay_ReplicasOfAnotherModeRefuseToStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ordered := b.config(t)
	ordered.ID, ordered.Mode = "ordered-1", outbox.ModeOrdered
	_, stopOrdered := relaytest.Start(t, b.db.Pool, ordered)
	waitfor.Condition(t, 10*time.Second, "the ordered relay to register", func() bool {
		var mode outbox.Mode
		_ = b.db.Pool.QueryRow(context.Background(), "SELECT mode FROM "+b.db.Table("relays")+" WHERE id = 'ordered-1'").Scan(&mode)
		return mode == outbox.ModeOrdered
	})

	// Ordered mode's indexes exist only in ordered mode (each costs every
	// insert of the other modes).
	indexed := func() bool { return headsIndexed(t, b) }
	if !indexed() {
		t.Errorf("ordered mode's indexes are missing in ordered mode")
	}

	unordered := b.config(t)
	unordered.ID = "unordered-1"
	r, err := relay.New(b.db.Pool, unordered)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	var conflict *relay.ModeConflictError
	if !errors.As(err, &conflict) || conflict.Recorded != outbox.ModeOrdered || !strings.Contains(err.Error(), "ordered-1") {
		t.Fatalf("an unordered relay beside an ordered one: Run = %v, want a ModeConflictError naming ordered-1", err)
	}

	// Once the ordered relay is gone, an unordered one switches the schema.
	stopOrdered()
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'x', 'k')`)
	relaytest.Start(t, b.db.Pool, unordered)
	relaytest.WaitDrained(t, b.db, 10*time.Second) // by the unordered relay: registered, switched
	var mode outbox.Mode
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT mode FROM "+b.db.Table("relay_mode")).Scan(&mode); err != nil || mode != outbox.ModeUnordered {
		t.Errorf("schema mode %q, %v after the unordered relay started alone", mode, err)
	}
	if indexed() {
		t.Errorf("ordered mode's indexes are still there after switching to unordered")
	}
}

// headsIndexed reports whether ordered mode's indexes exist: the due index
// of candidates, the index of waiting rows and the due index of rows
// without a key. It fails the test when only some of them do.
func headsIndexed(t *testing.T, b *bundle) bool {
	t.Helper()
	var n int
	err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_index
		WHERE indrelid = $1::regclass AND indexrelid IN (to_regclass($2), to_regclass($3), to_regclass($4))`,
		b.db.Table("messages"), b.db.Table("messages_heads_due_idx"), b.db.Table("messages_waiting_idx"),
		b.db.Table("messages_unkeyed_due_idx")).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 && n != 3 {
		t.Errorf("%d of ordered mode's 3 indexes exist", n)
	}
	return n == 3
}

// A schema recorded as ordered without ordered mode's indexes (a restore,
// a hand edit) is repaired by the next relay that registers.
func TestRelay_RegisteringRepairsTheHeadsIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `UPDATE %s.relay_mode SET mode = 'ordered'`) // without messages_apply_mode
	if headsIndexed(t, b) {
		t.Fatal("ordered mode's indexes exist before any ordered relay registered")
	}
	cfg := b.config(t)
	cfg.Mode = outbox.ModeOrdered
	relaytest.Start(t, b.db.Pool, cfg)
	waitfor.Condition(t, 10*time.Second, "ordered mode's indexes to be built", func() bool { return headsIndexed(t, b) })
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'x', 'k')`)
	relaytest.WaitDrained(t, b.db, 10*time.Second)
	if got := b.nats.Count(t, stream); got != 1 {
		t.Errorf("stream holds %d messages, want the keyed row delivered", got)
	}
}
