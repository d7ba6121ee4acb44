package relay

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// orderedRelay returns a relay of db in ordered mode that is not running:
// the tests call its claims and settles themselves.
func orderedRelay(t *testing.T, db *dbtest.Schema) (*Relay, *ordered) {
	t.Helper()
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModeOrdered, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	return r, r.mode.(*ordered)
}

// anyRows is a claim request without limits but its rows.
func anyRows(limit int) claimRequest {
	return claimRequest{limit: limit, bytes: 1 << 30, closed: []string{}}
}

// TestHeadsClaim_DoesNotWalkTheRowsBehindHeadsInFlight: once claims have
// marked the rows queued behind heads in flight as waiting, a claim of
// heads walks none of them, nor the entries they left in the candidates'
// index: with 100 heads in flight and 3,900 rows behind them, it reads a
// few hundred index entries at most, not thousands. The heads in flight
// are the keys' second rows, made candidates by the settle of the first
// (as in any drain), which moved them after the rows behind them.
func TestHeadsClaim_DoesNotWalkTheRowsBehindHeadsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 100) FROM generate_series(1, 4100) AS i`)
	r, m := orderedRelay(t, db)
	// The first claims lease the 100 heads and mark the rows behind them.
	var heads []claimed
	claims := 0
	for ; db.CountWhere(t, "messages", "NOT waiting AND leased_by IS NULL") > 0; claims++ {
		if claims == 50 {
			t.Fatalf("after %d claims, %d rows are neither leased nor waiting", claims, db.CountWhere(t, "messages", "NOT waiting AND leased_by IS NULL"))
		}
		batch, err := m.claim(ctx, anyRows(1000))
		if err != nil {
			t.Fatal(err)
		}
		heads = append(heads, batch...)
	}
	if len(heads) != 100 {
		t.Fatalf("the claims leased %d rows, want the 100 heads", len(heads))
	}
	// Their settle makes the second rows candidates; a claim leases them.
	settled := make([]outcome, len(heads))
	for i, h := range heads {
		settled[i] = outcome{id: h.ID, seq: h.seq, attempt: h.Attempt, sink: "nats", kind: kindDelivered, key: h.Key}
	}
	if err := r.settle(ctx, settled); err != nil {
		t.Fatal(err)
	}
	if batch, err := m.claim(ctx, anyRows(1000)); err != nil || len(batch) != 100 {
		t.Fatalf("the claim after the settle leased %d rows, %v; want the 100 next heads", len(batch), err)
	}
	for range 2 {
		if err := r.refreshFloor(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A claim now, with every head in flight.
	tx := planTx(t, db)
	before := readClaimStats(t, tx, r)
	ids := claimedIDs(t, tx, m.claimHeads, m.headsClaimArgs(anyRows(1000)))
	entries := readClaimStats(t, tx, r).entries - before.entries
	t.Logf("%d claims leased the heads and marked the rows behind them; then a claim read %d index entries", claims, entries)
	if len(ids) != 0 || entries > 300 {
		t.Errorf("a claim of heads with every key in flight leased %d rows and read %d index entries; want none and a few hundred at most", len(ids), entries)
	}
}

// TestHeadsSettle_SeesTheMarksOfAClaimItWaitedFor is the race the settle's
// second statement exists for (sql_heads.go): a claim marks row 2 of key k
// waiting behind row 1, in flight, and holds its lock on row 1 while the
// settle of row 1 deletes it. The settle waits for the claim, and its
// second statement, with a snapshot taken after the claim committed, makes
// row 2 a candidate again. Decided in the settle's first statement, on a
// snapshot taken before the claim committed, row 2 would wait for ever.
func TestHeadsSettle_SeesTheMarksOfAClaimItWaitedFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	r, m := orderedRelay(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'first', 'k')`)
	batch, err := m.claim(ctx, anyRows(10))
	if err != nil || len(batch) != 1 {
		t.Fatalf("the claim of the first row leased %d rows, %v; want 1", len(batch), err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'second', 'k')`)

	claim, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = claim.Rollback(ctx) }()
	if ids := claimedIDs(t, claim, m.claimHeads, m.headsClaimArgs(anyRows(10))); len(ids) != 0 {
		t.Fatalf("the claim leased %v while the first row is in flight", ids)
	}

	first := batch[0]
	settled := make(chan error, 1)
	go func() {
		settled <- r.settle(ctx, []outcome{{id: first.ID, seq: first.seq, attempt: first.Attempt, sink: "nats", kind: kindDelivered, key: "k"}})
	}()
	waitfor.Condition(t, 10*time.Second, "the settle to wait for the claim's lock on the first row", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		                                 WHERE wait_event_type = 'Lock' AND query LIKE '%archived AS (%' AND position($1 IN query) > 0`, db.Name).Scan(&n)
		return n > 0
	})
	if err := claim.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if n := db.CountWhere(t, "messages", "waiting"); n != 0 {
		t.Fatalf("%d rows wait after their key's head was settled", n)
	}
	batch, err = m.claim(ctx, anyRows(10))
	if err != nil || len(batch) != 1 || string(batch[0].Payload) != "second" {
		t.Errorf("the claim after the settle leased %d rows, %v; want the second row", len(batch), err)
	}
}
