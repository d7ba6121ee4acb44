package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestFloor_RowsOfLateCommittersAreDelivered runs, in each mode, writers
// whose transactions stay open across many refreshes of the claim floor
// and commit late (some past the floor's patience, one for seconds after
// the floor passed its rows), beside a steady producer that keeps the
// floor moving and a session that pins the horizon. Every row arrives
// once, and the floor did pass the long writer's rows while it was open.
func TestFloor_RowsOfLateCommittersAreDelivered(t *testing.T) {
	for _, mode := range []outbox.Mode{outbox.ModeUnordered, outbox.ModeOrdered, outbox.ModePartitioned} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config(t)
			cfg.Mode = mode
			ctx := context.Background()
			insert := func(tx pgx.Tx, who string, i int) {
				t.Helper()
				key := any(nil)
				if i%2 == 0 {
					key = fmt.Sprintf("%s-%d", who, i) // a key of its own: no order between writers
				}
				if _, err := tx.Exec(ctx, "INSERT INTO "+b.db.Table("messages")+" (topic, payload, key) VALUES ($1, $2, $3)",
					"events."+who, fmt.Sprintf("%s %d", who, i), key); err != nil {
					t.Error(err)
				}
			}
			w := lateWriters{long: 4, steady: 600, late: 24, every: 50 * time.Millisecond}
			w.run(t, b, cfg, insert)
			want := w.rows()
			deadline := time.Now().Add(30 * time.Second)
			for b.db.Count(t, "archive") != want && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if n := b.db.Count(t, "archive"); n != want {
				rows, _ := b.db.Pool.Query(ctx, "SELECT id, topic, key, available_at, leased_by, attempts, now() FROM "+b.db.Table("messages")+" ORDER BY id")
				for rows.Next() {
					v, _ := rows.Values()
					t.Logf("left: %v", v)
				}
				rows.Close()
				t.Fatalf("archive holds %d rows, want %d; floor lag %.3fs", n, want, testutil.ToFloat64(cfg.Metrics.ClaimFloorLag))
			}
			relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, want)
			if n := b.db.Count(t, "messages_all"); n != 0 {
				t.Errorf("%d rows left in the hot table", n)
			}
		})
	}
}

// TestFloor_LateCommittersOfAKeyLoseNothing runs, in the modes that keep a
// key's order, writers of one key whose transactions commit late (some
// past the floor's patience, one for seconds after the floors passed its
// rows: the time floor's lag shows it, and the id floor leaves an old
// transaction behind with it), beside a steady producer of the same key
// and a session that pins the horizon. The lookups of the key's oldest row
// start at the id floor: every late row still arrives, once, and the
// steady producer's rows, committed one after the other, arrive in order.
func TestFloor_LateCommittersOfAKeyLoseNothing(t *testing.T) {
	for mode, set := range keyOrderModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config(t)
			set(&cfg)
			ctx := context.Background()
			insert := func(tx pgx.Tx, who string, i int) {
				t.Helper()
				if _, err := tx.Exec(ctx, "INSERT INTO "+b.db.Table("messages")+" (topic, payload, key, idempotency_key) VALUES ($1, $2, 'shared', $3)",
					"events."+who, fmt.Sprintf("%s %d", who, i), fmt.Sprintf("%s-%d", who, i)); err != nil {
					t.Error(err)
				}
			}
			w := lateWriters{long: 3, steady: 400, late: 16, every: 60 * time.Millisecond}
			w.run(t, b, cfg, insert)
			want := w.rows()
			relaytest.WaitDrained(t, b.db, 30*time.Second)
			if n := b.db.Count(t, "archive"); n != want {
				t.Fatalf("archive holds %d rows, want %d", n, want)
			}
			relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, want)
			next := 0
			for _, m := range b.nats.Messages(t, stream) {
				var i int
				if _, err := fmt.Sscanf(m.Header.Get(nats.MsgIdHdr), "steady-%d", &i); err != nil {
					continue
				}
				if i < next-1 {
					t.Fatalf("steady row %d arrived after row %d", i, next-1)
				}
				next = max(next, i+1)
			}
			if next != w.steady {
				t.Errorf("saw steady rows up to %d, want %d", next, w.steady)
			}
		})
	}
}

// lateWriters is the workload of the late-committer tests: a session that
// pins the horizon from before the relay starts (until the test ends), a
// long writer that inserts its rows first and commits a second after the
// claim floor passed them (its lag under a second), a producer committing
// one row every 5 ms, and late writers, started every apart, that commit
// 0 to 2.4 s after their insert.
type lateWriters struct {
	long, steady, late int
	every              time.Duration
}

// rows returns how many rows w writes.
func (w lateWriters) rows() int { return w.long + w.steady + w.late }

// run starts cfg's relay on b under the pin, runs w with insert writing
// each row (who: long, steady or late; i: its number) and returns once
// every writer committed.
func (w lateWriters) run(t *testing.T, b *bundle, cfg relay.Config, insert func(tx pgx.Tx, who string, i int)) {
	t.Helper()
	ctx := context.Background()
	// A session that holds its snapshot from before the relay starts:
	// nothing the relay deletes can be removed.
	pin := b.db.Conn(t)
	pinTx, err := pin.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pinTx.Rollback(ctx) })
	if _, err := pinTx.Exec(ctx, "SELECT count(*) FROM "+b.db.Table("messages")); err != nil {
		t.Fatal(err)
	}
	relaytest.Start(t, b.db.Pool, cfg)

	long := b.db.Conn(t)
	longTx, err := long.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.long {
		insert(longTx, "long", i)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range w.steady {
			tx, err := b.db.Pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			insert(tx, "steady", i)
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	for l := range w.late {
		wg.Go(func() {
			time.Sleep(time.Duration(l) * w.every)
			tx, err := b.db.Pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			insert(tx, "late", l)
			time.Sleep(time.Duration(rand.IntN(2400)) * time.Millisecond)
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	// The floor passes the long writer's rows while it is open: it lags
	// the refreshes by less than the writer's age.
	time.Sleep(2 * time.Second)
	waitfor.Condition(t, 10*time.Second, "the floor to pass the long writer's rows", func() bool {
		return testutil.ToFloat64(cfg.Metrics.ClaimFloorLag) < 1
	})
	time.Sleep(time.Second)
	if err := longTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}
