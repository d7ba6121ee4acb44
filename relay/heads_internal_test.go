package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

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
	m.markAfter = 0 // rows behind heads just leased are marked too
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
		settled[i] = outcome{id: h.ID, seq: h.seq, attempt: h.Attempt, sink: "nats", kind: kindDelivered, key: h.Key, keyed: true}
	}
	if err := r.settle(ctx, settled); err != nil {
		t.Fatal(err)
	}
	if batch, err := m.claim(ctx, anyRows(1000)); err != nil || len(batch) != 100 {
		t.Fatalf("the claim after the settle leased %d rows, %v; want the 100 next heads", len(batch), err)
	}
	// The relay's floor refreshes put the floor at the oldest candidate:
	// the heads in flight, made candidates after the rows behind them.
	for deadline := time.Now().Add(10 * time.Second); r.floor.current().InfinityModifier != pgtype.Finite; {
		if time.Now().After(deadline) {
			t.Fatal("the claim floor is still unknown after 10 s of refreshes")
		}
		r.floor.found()
		if err := r.refreshFloor(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(floorEvery + 10*time.Millisecond)
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
	m.markAfter = 0 // the claim marks the row behind the head it just leased
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
	var marked int
	if err := claim.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("messages")+" WHERE waiting").Scan(&marked); err != nil || marked != 1 {
		t.Fatalf("the claim marked %d rows waiting, %v; want the second row", marked, err)
	}

	first := batch[0]
	settled := make(chan error, 1)
	go func() {
		settled <- r.settle(ctx, []outcome{{id: first.ID, seq: first.seq, attempt: first.Attempt, sink: "nats", kind: kindDelivered, key: "k", keyed: true}})
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

// TestHeadsClaim_MarksOnlyBehindHeadsInFlightForLong: a claim leaves the
// rows behind a head leased less than markWaitingAfter ago unmarked (its
// delivery will most likely end before the next claim), and marks the
// rows behind a head that backs off, or has been in flight for longer.
func TestHeadsClaim_MarksOnlyBehindHeadsInFlightForLong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, m := orderedRelay(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', k FROM unnest(array['fresh', 'slow', 'failing']) AS k, generate_series(1, 3)`)
	// The heads of slow and failing: one leased a minute ago, one backing off.
	db.Exec(t, `UPDATE %s.messages SET leased_by = 'other', leased_until = now() + interval '30 seconds' - interval '1 minute' + interval '70 seconds', attempts = 1
	             WHERE id = (SELECT min(id) FROM %s.messages WHERE key = 'slow')`)
	db.Exec(t, `UPDATE %s.messages SET attempts = 1, last_error = 'e', available_at = now() + interval '1 hour'
	             WHERE id = (SELECT min(id) FROM %s.messages WHERE key = 'failing')`)
	// The head of fresh: leased by this claim.
	batch, err := m.claim(ctx, anyRows(100))
	if err != nil || len(batch) != 1 || batch[0].Key != "fresh" {
		t.Fatalf("the claim leased %d rows, %v; want the head of fresh", len(batch), err)
	}
	for key, want := range map[string]int{"fresh": 0, "slow": 2, "failing": 2} {
		if n := db.CountWhere(t, "messages", "waiting AND key = '"+key+"'"); n != want {
			t.Errorf("%d rows of %s marked waiting, want %d", n, key, want)
		}
	}
	// The head of fresh is still in flight, but for long now: the next claim
	// marks the rows behind it.
	time.Sleep(markWaitingAfter + 50*time.Millisecond)
	if _, err := m.claim(ctx, anyRows(100)); err != nil {
		t.Fatal(err)
	}
	if n := db.CountWhere(t, "messages", "waiting AND key = 'fresh'"); n != 2 {
		t.Errorf("%d rows of fresh marked waiting after its head was in flight for %s, want 2", n, markWaitingAfter)
	}
}

// TestHeadsSettle_TheEmptyKeyIsAKey: rows whose key is ” (not NULL) are a
// key's rows like any other: the settle of their head, delivered by the
// relay, makes the next one a candidate, though a message's Key is "" for
// a row without a key too.
func TestHeadsSettle_TheEmptyKeyIsAKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	r, m := orderedRelay(t, db)
	m.markAfter = 0
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', convert_to('x' || i, 'UTF8'), '' FROM generate_series(1, 3) AS i`)
	for i := 1; i <= 3; i++ {
		batch, err := m.claim(ctx, anyRows(10))
		if err != nil || len(batch) != 1 || string(batch[0].Payload) != fmt.Sprintf("x%d", i) {
			t.Fatalf("claim %d leased %d rows, %v; want row x%d", i, len(batch), err, i)
		}
		if i == 1 {
			// The claim after marks the rows behind the head in flight.
			if _, err := m.claim(ctx, anyRows(10)); err != nil {
				t.Fatal(err)
			}
			if n := db.CountWhere(t, "messages", "waiting"); n != 2 {
				t.Fatalf("%d rows of key '' wait behind its head in flight, want 2", n)
			}
		}
		c := batch[0]
		if err := r.settle(ctx, []outcome{newOutcome(&c.Message, c.tag(), "nats")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.Count(t, "messages"); n != 0 {
		t.Errorf("%d rows left", n)
	}
}
