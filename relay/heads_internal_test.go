package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// orderedRelay returns a relay of db in ordered mode that is not running:
// the tests call its claims and settles themselves.
func orderedRelay(t *testing.T, db *dbtest.Schema) (*Relay, *ordered) {
	t.Helper()
	return orderedRelayNamed(t, db, "")
}

// orderedRelayNamed is orderedRelay with the RELAY_ID id ("": the default),
// for tests of two relays' claims.
func orderedRelayNamed(t *testing.T, db *dbtest.Schema, id string) (*Relay, *ordered) {
	t.Helper()
	r, err := New(db.Pool, Config{ID: id, Schema: db.Name, Mode: outbox.ModeOrdered, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
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
// (as in any drain), which moved them after the rows behind them, with
// their runs. The first heads are in flight in another relay: a relay
// claims the rows behind its own rows in flight
// (TestHeadsClaim_TakesTheRowsBehindItsOwnRowsInFlight).
func TestHeadsClaim_DoesNotWalkTheRowsBehindHeadsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	r, m := orderedRelay(t, db)
	otherRelay, other := orderedRelayNamed(t, db, "relay-b")
	m.markAfter = 0 // rows behind heads just leased are marked too
	// The other relay's claim leases the 100 heads; the rows written
	// behind them after it are marked by the claims that follow.
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || i FROM generate_series(0, 99) AS i`)
	heads, err := other.claimHeadsOfKeys(ctx, anyRows(1000))
	if err != nil || len(heads) != 100 {
		t.Fatalf("the first claim leased %d rows, %v; want the 100 heads", len(heads), err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 100) FROM generate_series(1, 4000) AS i`)
	claims := 1
	for ; db.CountWhere(t, "messages_all", "NOT waiting AND leased_by IS NULL") > 0; claims++ {
		if claims == 50 {
			t.Fatalf("after %d claims, %d rows are neither leased nor waiting", claims, db.CountWhere(t, "messages_all", "NOT waiting AND leased_by IS NULL"))
		}
		if batch, err := m.claimHeadsOfKeys(ctx, anyRows(1000)); err != nil || len(batch) != 0 {
			t.Fatalf("a claim with every key in flight leased %d rows, %v", len(batch), err)
		}
	}
	// Their settle makes the second rows candidates; a claim leases them,
	// each with a run of the next 9 (1,000 rows over 100 heads).
	settled := make([]rowOutcome, len(heads))
	for i, h := range heads {
		settled[i] = rowOutcome{id: h.ID, seq: h.seq, attempt: h.Attempt, sink: "nats", kind: kindDelivered, key: h.Key, keyed: true}
	}
	if err := otherRelay.settler.settleBatch(ctx, settled); err != nil {
		t.Fatal(err)
	}
	if batch, err := m.claimHeadsOfKeys(ctx, anyRows(1000)); err != nil || len(batch) != 1000 {
		t.Fatalf("the claim after the settle leased %d rows, %v; want the 100 next heads with their runs", len(batch), err)
	}
	// The relay's floor refreshes put the floor at the oldest candidate:
	// the heads in flight, made candidates after the rows behind them.
	for deadline := time.Now().Add(10 * time.Second); r.engine.floor.Current().InfinityModifier != pgtype.Finite; {
		if time.Now().After(deadline) {
			t.Fatal("the claim floor is still unknown after 10 s of refreshes")
		}
		r.floor.Found()
		if err := r.floor.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(110 * time.Millisecond) // a refresh is due every 100 ms while claims find rows
	}
	// A claim now, with every key in flight: it walks past the 1,000 rows
	// in flight (candidates, leased), as a claim in any mode does, but not
	// the 2,900 rows waiting behind them.
	tx := planTx(t, db)
	before := readClaimStats(t, tx, r)
	ids := claimedIDs(t, tx, m.claimHeads, m.headsClaimArgs(anyRows(1000)))
	entries := readClaimStats(t, tx, r).entries - before.entries
	t.Logf("%d claims leased the heads and marked the rows behind them; then a claim read %d index entries", claims, entries)
	if len(ids) != 0 || entries > 1000+300 {
		t.Errorf("a claim of heads with every key in flight leased %d rows and read %d index entries; want none, and the 1,000 rows in flight and a few hundred more at most", len(ids), entries)
	}
}

// TestHeadsSettle_SeesTheMarksOfAClaimItWaitedFor is the race the settle's
// second statement exists for (sql_heads.go): a claim marks row 2 of key k
// waiting behind row 1, in flight, and holds its lock on row 1 while the
// settle of row 1 deletes it. The settle waits for the claim, and its
// second statement, with a snapshot taken after the claim committed, makes
// row 2 a candidate again. Decided in the settle's first statement, on a
// snapshot taken before the claim committed, row 2 would wait for ever.
// Row 1 is in flight in another relay (a relay claims the rows behind its
// own).
func TestHeadsSettle_SeesTheMarksOfAClaimItWaitedFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, m := orderedRelay(t, db)
	r, other := orderedRelayNamed(t, db, "relay-b")
	m.markAfter = 0 // the claim marks the row behind the head just leased
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'first', 'k')`)
	batch, err := other.claimHeadsOfKeys(ctx, anyRows(10))
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
		settled <- r.settler.settleBatch(ctx, []rowOutcome{{id: first.ID, seq: first.seq, attempt: first.Attempt, sink: "nats", kind: kindDelivered, key: "k", keyed: true}})
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
	if n := db.CountWhere(t, "messages_all", "waiting"); n != 0 {
		t.Fatalf("%d rows wait after their key's head was settled", n)
	}
	batch, err = m.claimHeadsOfKeys(ctx, anyRows(10))
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
	_, other := orderedRelayNamed(t, db, "relay-b")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', k FROM unnest(array['slow', 'failing']) AS k, generate_series(1, 3)`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'x', 'fresh')`)
	// The heads of slow and failing: one leased a minute ago, one backing off.
	db.Exec(t, `UPDATE %s.messages SET leased_by = 'other', leased_until = now() + interval '30 seconds' - interval '1 minute' + interval '70 seconds', attempts = 1
	             WHERE id = (SELECT min(id) FROM %s.messages WHERE key = 'slow')`)
	db.Exec(t, `UPDATE %s.messages SET attempts = 1, last_error = 'e', available_at = now() + interval '1 hour'
	             WHERE id = (SELECT min(id) FROM %s.messages WHERE key = 'failing')`)
	// The head of fresh: leased by another relay's claim, in flight for
	// less than markAfter at the next claim however slow the machine (with
	// markWaitingAfter, 100 ms, a loaded CI machine took longer).
	m.markAfter = time.Minute
	batch, err := other.claimHeadsOfKeys(ctx, anyRows(100))
	if err != nil || len(batch) != 1 || batch[0].Key != "fresh" {
		t.Fatalf("the claim leased %d rows, %v; want the head of fresh", len(batch), err)
	}
	// Two more rows of fresh, behind its head in flight.
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'fresh' FROM generate_series(1, 2)`)
	if batch, err := m.claimHeadsOfKeys(ctx, anyRows(100)); err != nil || len(batch) != 0 {
		t.Fatalf("the claim leased %d rows, %v, with every key's head in flight or backing off", len(batch), err)
	}
	for key, want := range map[string]int{"fresh": 0, "slow": 2, "failing": 2} {
		if n := db.CountWhere(t, "messages_all", "waiting AND key = '"+key+"'"); n != want {
			t.Errorf("%d rows of %s marked waiting, want %d", n, key, want)
		}
	}
	// The head of fresh is still in flight, but for long now: the next claim
	// marks the rows behind it.
	m.markAfter = markWaitingAfter
	time.Sleep(markWaitingAfter + 50*time.Millisecond)
	if _, err := m.claimHeadsOfKeys(ctx, anyRows(100)); err != nil {
		t.Fatal(err)
	}
	if n := db.CountWhere(t, "messages_all", "waiting AND key = 'fresh'"); n != 2 {
		t.Errorf("%d rows of fresh marked waiting after its head was in flight for %s, want 2", n, markWaitingAfter)
	}
}

// TestHeadsClaim_TakesTheRowsBehindItsOwnRowsInFlight: a claim leases the
// rows of a key behind the key's rows in flight in its own relay, with
// their run, and names the row in flight the first of them follows
// (after): the relay sends them once that row has passed
// (relay/internal/keychain). Behind another relay's row in flight, or
// behind a row of its key that is not in flight here (one that backs
// off), it marks them waiting, as before; and so behind a retried row in
// flight here (it goes alone, and the rows behind it wait for its
// outcome), and behind a row leased under this relay's id that its chains
// do not hold (a process before it with the same RELAY_ID): rows named
// after it would be released unsent, and claimed again, until its lease
// ran out.
func TestHeadsClaim_TakesTheRowsBehindItsOwnRowsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, m := orderedRelay(t, db)
	_, other := orderedRelayNamed(t, db, "relay-b")
	m.markAfter = 0 // every row a claim may mark, it marks
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'mine1', 'mine'), ('events.a', 'gap1', 'gap'), ('events.a', 'retried1', 'retried')`)
	first, err := m.claimHeadsOfKeys(ctx, anyRows(40))
	if err != nil || len(first) != 3 {
		t.Fatalf("the first claim leased %d rows, %v; want mine1, gap1 and retried1", len(first), err)
	}
	db.Exec(t, `UPDATE %s.messages SET last_error = 'failed before' WHERE payload = 'retried1'`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'before1', 'before')`)
	db.Exec(t, `UPDATE %s.messages SET leased_by = '`+m.e.cfg.ID+`', leased_until = now() + interval '1 minute', attempts = 1 WHERE payload = 'before1'`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'theirs1', 'theirs')`)
	if batch, err := other.claimHeadsOfKeys(ctx, anyRows(10)); err != nil || len(batch) != 1 {
		t.Fatalf("the other relay's claim leased %d rows, %v; want theirs1", len(batch), err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, available_at) VALUES ('events.a', 'gap2', 'gap', now() + interval '1 hour')`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key)
	            SELECT 'events.a', convert_to(k || i, 'UTF8'), k FROM unnest(array['mine', 'theirs', 'retried', 'before']) AS k, generate_series(2, 3) AS i`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'gap3', 'gap')`)

	batch, err := m.claimHeadsOfKeys(ctx, anyRows(40)) // walking 10 candidates
	var got []string
	for _, c := range batch {
		got = append(got, fmt.Sprintf("%s after %d", c.Payload, c.after))
	}
	mine1 := first[0].ID
	if string(first[0].Payload) != "mine1" {
		mine1 = first[1].ID
	}
	if want := fmt.Sprint([]string{fmt.Sprintf("mine2 after %d", mine1), "mine3 after 0"}); err != nil || fmt.Sprint(got) != want {
		t.Fatalf("the claim leased %v, %v; want %s (mine3 follows mine2 in the claim)", got, err, want)
	}
	var waiting []string
	rows, err := db.Pool.Query(ctx, "SELECT convert_from(payload, 'UTF8') FROM "+db.Table("messages_all")+" WHERE waiting ORDER BY payload")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, p)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if want := "[before2 before3 gap3 retried2 retried3 theirs2 theirs3]"; fmt.Sprint(waiting) != want {
		t.Errorf("the claim marked %v waiting, want %s: behind relay-b's row, behind gap2 (it backs off), behind retried1 and behind before1 (leased under this relay's id by no claim of its own)", waiting, want)
	}
}

// TestHeadsSettle_TheEmptyKeyIsAKey: rows whose key is ” (not NULL) are a
// key's rows like any other: the settle of their head, delivered by the
// relay, makes the next one a candidate, though a message's Key is "" for
// a row without a key too; the claim then takes it with its run.
func TestHeadsSettle_TheEmptyKeyIsAKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	r, m := orderedRelay(t, db)
	_, other := orderedRelayNamed(t, db, "relay-b")
	other.markAfter = 0
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'x1', '')`)
	want := [][]string{{"x1"}, {"x2", "x3"}}
	for i := range want {
		batch, err := m.claimHeadsOfKeys(ctx, anyRows(10))
		var got []string
		for _, c := range batch {
			got = append(got, string(c.Payload))
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Fatalf("claim %d leased %v, %v; want %v", i+1, got, err, want[i])
		}
		if i == 0 {
			// Another relay's claim marks the rows written behind the
			// head in flight.
			db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', convert_to('x' || i, 'UTF8'), '' FROM generate_series(2, 3) AS i`)
			if _, err := other.claimHeadsOfKeys(ctx, anyRows(10)); err != nil {
				t.Fatal(err)
			}
			if n := db.CountWhere(t, "messages_all", "waiting"); n != 2 {
				t.Fatalf("%d rows of key '' wait behind its head in flight, want 2", n)
			}
		}
		var settled []rowOutcome
		for _, c := range batch {
			settled = append(settled, newOutcome(&c.Message, c.tag(), "nats"))
		}
		if err := r.settler.settleBatch(ctx, settled); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.Count(t, "messages_all"); n != 0 {
		t.Errorf("%d rows left", n)
	}
}

// TestHeadsClaim_TakesAKeysRunUpToTheFirstRowItMayNotTake: a claim leases
// each head with the rows that follow it in its key, in id order, and
// stops a run at the first row it may not take (not due yet, bound for
// another sink, locked by another transaction), so that it never skips a
// row of the key; rows marked waiting are taken, and are candidates again
// while in flight, not below the claim floor; a run holds at most the
// claim's share of rows per head.
func TestHeadsClaim_TakesAKeysRunUpToTheFirstRowItMayNotTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, m := orderedRelay(t, db)
	for _, key := range []string{"later", "elsewhere", "locked", "waiting"} {
		db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', convert_to('`+key+`' || i, 'UTF8'), '`+key+`' FROM generate_series(1, 4) AS i`)
	}
	db.Exec(t, `UPDATE %s.messages SET available_at = now() + interval '1 hour' WHERE payload = 'later3'`)
	db.Exec(t, `UPDATE %s.messages SET destination = 'other' WHERE payload = 'elsewhere2'`)
	db.Exec(t, `UPDATE %s.messages SET waiting = true WHERE payload IN ('waiting2', 'waiting3')`)
	other, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, "SELECT 1 FROM "+db.Table("messages")+" WHERE payload = 'locked3' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	batch, err := m.claimHeadsOfKeys(ctx, anyRows(100))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range batch {
		got = append(got, string(c.Payload))
	}
	want := "[later1 later2 elsewhere1 locked1 locked2 waiting1 waiting2 waiting3 waiting4]"
	if fmt.Sprint(got) != want {
		t.Errorf("the claim leased %v, want %s (in id order)", got, want)
	}
	if n := db.CountWhere(t, "messages_all", "waiting"); n != 0 {
		t.Errorf("%d rows are marked waiting, want none (waiting2 and waiting3 are leased)", n)
	}
	if n := db.CountWhere(t, "messages_all", "payload IN ('waiting2', 'waiting3') AND available_at > created_at"); n != 2 {
		t.Errorf("%d of waiting2 and waiting3 have the available_at of their lease, want both", n)
	}
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// A run holds the claim's share of rows per head: 5 rows for one head.
	deep := dbtest.New(t)
	deep.SetMode(t, outbox.ModeOrdered)
	_, m = orderedRelay(t, deep)
	deep.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'deep' FROM generate_series(1, 20)`)
	if batch, err := m.claimHeadsOfKeys(ctx, anyRows(5)); err != nil || len(batch) != 5 || batch[0].Key != "deep" {
		t.Errorf("a claim of 5 rows leased %d, %v; want the first 5 rows of deep", len(batch), err)
	}
}

// TestHeadsRun_AFailureHoldsTheRestOfItsKey: a run is delivered one row
// after the other; when a row fails, the rows after it are released
// without an attempt and nothing of its key goes out until it is
// delivered; then the rest follows, in order, the released rows that were
// marked waiting included. The key ” is a key like any other.
func TestHeadsRun_AFailureHoldsTheRestOfItsKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"k", ""} {
		t.Run(fmt.Sprintf("key %q", key), func(t *testing.T) {
			t.Parallel()
			failureHoldsTheRestOfItsKey(t, key)
		})
	}
}

func failureHoldsTheRestOfItsKey(t *testing.T, key string) {
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	var mu sync.Mutex
	var sent []string
	failOnce := true
	sink := &sinktest.Func{DeliverFunc: func(_ context.Context, msgs []sinks.Message) []error {
		mu.Lock()
		defer mu.Unlock()
		errs := make([]error, len(msgs))
		for i, msg := range msgs {
			if string(msg.Payload) == "x3" && failOnce {
				failOnce = false
				errs[i] = errors.New("refused once")
				continue
			}
			sent = append(sent, string(msg.Payload))
		}
		return errs
	}}
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModeOrdered, Sinks: map[string]sinks.Sink{"nats": sink},
		BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.mode.(*ordered).markAfter = 0
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', convert_to('x' || i, 'UTF8'), '`+key+`' FROM generate_series(1, 6) AS i`)
	db.Exec(t, `UPDATE %s.messages SET waiting = true WHERE payload IN ('x4', 'x5')`)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	waitfor.Condition(t, 20*time.Second, "every row delivered", func() bool { return db.Count(t, "messages_all") == 0 })
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(sent) != "[x1 x2 x3 x4 x5 x6]" {
		t.Errorf("sent %v, want x1 to x6 once each, in order", sent)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, "SELECT coalesce(max(attempts), 0) FROM "+db.Table("archive")+" WHERE payload IN ('x4', 'x5', 'x6')").Scan(&attempts); err != nil || attempts != 1 {
		t.Errorf("the rows after the failed one took %d attempts at most, %v; want 1 (released without an attempt)", attempts, err)
	}
}

// TestHeadsClaim_LeasesTheHeadsItsWalkDoesNotReach: a key's oldest row made
// a candidate again by a settle sorts after the rows behind it (its
// available_at is the clock's); a claim whose walk meets only those rows
// leases the key's oldest row with its run all the same, rather than mark
// them waiting one claim after another before it reaches the head.
func TestHeadsClaim_LeasesTheHeadsItsWalkDoesNotReach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, m := orderedRelay(t, db)
	m.markAfter = 0
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', convert_to('k' || i, 'UTF8'), 'k' FROM generate_series(1, 6) AS i`)
	db.Exec(t, `UPDATE %s.messages SET available_at = clock_timestamp() WHERE payload = 'k1'`)
	// A claim of 4 rows walks one candidate (headsWalkShare): k2.
	batch, err := m.claimHeadsOfKeys(ctx, anyRows(4))
	var got []string
	for _, c := range batch {
		got = append(got, string(c.Payload))
	}
	if err != nil || fmt.Sprint(got) != "[k1 k2 k3 k4]" {
		t.Errorf("the claim leased %v, %v; want k1 with its run, k2 to k4", got, err)
	}
	if n := db.CountWhere(t, "messages_all", "waiting"); n != 0 {
		t.Errorf("%d rows marked waiting behind the head the claim leased, want none", n)
	}
}

// TestHeadsClaim_AClaimThatMovesNoRowTakesNoTransactionID: a claim takes a
// transaction id before it moves a waiting row's available_at (the claim
// floor's rule), or as its writes need one: an idle relay's polls take
// none (transaction ids are a finite resource, and a claim in progress
// with one is a writer to the floor's refreshes).
func TestHeadsClaim_AClaimThatMovesNoRowTakesNoTransactionID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, m := orderedRelay(t, db)
	xidAfterClaim := func() (assigned bool, leased int) {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		ids := claimedIDs(t, tx, m.claimHeads, m.headsClaimArgs(anyRows(100)))
		if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned() IS NOT NULL").Scan(&assigned); err != nil {
			t.Fatal(err)
		}
		return assigned, len(ids)
	}
	if assigned, _ := xidAfterClaim(); assigned {
		t.Errorf("a claim of an empty table took a transaction id")
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' FROM generate_series(1, 3)`)
	if assigned, leased := xidAfterClaim(); !assigned || leased != 3 {
		t.Errorf("a claim leasing candidates: transaction id %v, %d rows leased; want one (the lease writes), 3 rows", assigned, leased)
	}
}

// TestHeadsClaim_MarksInOnePassOverItsWalk: 100 heads in flight and 250
// rows walked behind them, each to be marked waiting. The claim finds each
// walked row's blocker by its key once: no node of its plan runs more than
// a few times per walked row. (Found as a correlated lookup of the key's
// oldest row per pair of walked row and blocker, 19,000 loops for 250 rows
// and 0.8 s of CPU a claim: with 100 hot keys, claims and the settles that
// waited for their locks took seconds, and both relays of the pinned-horizon
// benchmark fell behind, the unpinned one too.)
//
// The heads are in flight in another relay; behind its own, a relay
// leases rather than marks (TestHeadsClaim_TakesTheRowsBehindItsOwnRowsInFlight).
func TestHeadsClaim_MarksInOnePassOverItsWalk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, m := orderedRelay(t, db)
	_, other := orderedRelayNamed(t, db, "relay-b")
	m.markAfter = 0
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || i FROM generate_series(0, 99) AS i`)
	if heads, err := other.claimHeadsOfKeys(ctx, anyRows(1000)); err != nil || len(heads) != 100 {
		t.Fatalf("the first claim leased %d rows, %v; want the 100 heads", len(heads), err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 100) FROM generate_series(1, 1000) AS i`)
	tx := planTx(t, db)
	plan := explain(t, tx, m.claimHeads, m.headsClaimArgs(anyRows(1000)))
	if n := db.CountWhere(t, "messages_all", "waiting"); n != 0 {
		t.Fatalf("%d rows waiting outside the explained claim's transaction", n)
	}
	var most float64
	var mostNode string
	eachPlanNode(plan, func(n map[string]any) {
		if loops, _ := n["Actual Loops"].(float64); loops > most {
			most, mostNode = loops, fmt.Sprintf("%v %v %v", n["Node Type"], n["Subplan Name"], n["CTE Name"])
		}
	})
	walked := float64(1000 / headsWalkShare)
	t.Logf("most loops of a node: %v (%s)", most, mostNode)
	if most > 4*walked {
		t.Errorf("a node of the claim ran %v times (%s) for a walk of %v rows; want a few times per walked row at most", most, mostNode, walked)
	}
	var waiting int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("messages")+" WHERE waiting").Scan(&waiting); err != nil || waiting != int(walked) {
		t.Errorf("the claim marked %d rows waiting, %v; want the %v it walked", waiting, err, walked)
	}
}

// TestHeadsClaim_TakesRunsInOnePass: 100 keys of 10 rows each, claimed in
// one claim of 1,000 rows, the heads with their runs. No scan of the
// claim's own results (a CTE) runs more than once per walked row. (Each
// follower met its locked version in a nested loop over all of them: 988
// scans of 988 rows, most of a second per claim.)
func TestHeadsClaim_TakesRunsInOnePass(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, m := orderedRelay(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 100) FROM generate_series(0, 999) AS i`)
	tx := planTx(t, db)
	walked := float64(1000 / headsWalkShare)
	if scans := cteScansOver(explain(t, tx, m.claimHeads, m.headsClaimArgs(anyRows(1000))), walked); len(scans) > 0 {
		t.Errorf("a claim of 100 heads and their runs scanned its own results over and over: %v", scans)
	}
	var leased int
	if err := tx.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Table("messages")+" WHERE leased_by IS NOT NULL").Scan(&leased); err != nil || leased != 1000 {
		t.Errorf("the claim leased %d rows, %v; want the 100 heads and their runs, 1,000", leased, err)
	}
}

// TestHeadsClaim_OneClaimAtATimePerSchema: while one relay's claim of heads
// is under way (here, its transaction left open), another relay's claim of
// heads walks nothing, leases nothing and marks nothing, though a key's
// head is free, rather than meet the first claim's heads as heads nobody
// holds and mark the rows behind them: the relay does not run the claim,
// and counts the turn (outbox_relay_heads_claims_busy_total), and the claim
// statement run all the same (as after a race with the question) leases and
// marks nothing; once the first claim has committed, the next claim leases
// the free key's head with its run.
func TestHeadsClaim_OneClaimAtATimePerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, a := orderedRelay(t, db)
	_, b := orderedRelayNamed(t, db, "relay-b")
	b.markAfter = 0 // it would mark the rows behind a head just leased
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 2) FROM generate_series(0, 3) AS i`)

	first := planTx(t, db)
	if ids := claimedIDs(t, first, a.claimHeads, a.headsClaimArgs(anyRows(1))); len(ids) != 1 {
		t.Fatalf("the first claim leased %v; want k0's head", ids)
	}
	if batch, err := b.claimHeadsOfKeys(ctx, anyRows(10)); err != nil || len(batch) != 0 {
		t.Fatalf("a claim beside another relay's claim under way leased %d rows, %v; want none", len(batch), err)
	}
	if n := db.CountWhere(t, "messages_all", "waiting"); n != 0 {
		t.Fatalf("a claim beside another relay's claim under way marked %d rows waiting; want none", n)
	}
	if busy := testutil.ToFloat64(b.e.metrics.HeadsClaimsBusy); busy != 1 {
		t.Errorf("outbox_relay_heads_claims_busy_total is %v after a claim beside another relay's claim under way; want 1", busy)
	}
	if ran := claimsObserved(t, b); ran != 0 {
		t.Errorf("%d claims of heads ran beside another relay's claim under way; want none run", ran)
	}
	// A claim that runs all the same (it asked while the lock was free)
	// takes the lock in its statement, finds it taken, and leases and
	// marks nothing.
	late := planTx(t, db)
	if ids := claimedIDs(t, late, b.claimHeads, b.headsClaimArgs(anyRows(10))); len(ids) != 0 {
		t.Fatalf("a claim statement run beside another relay's claim under way leased %v; want none", ids)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := db.CountWhere(t, "messages_all", "waiting"); n != 0 {
		t.Fatalf("a claim statement run beside another relay's claim under way marked %d rows waiting; want none", n)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	batch, err := b.claimHeadsOfKeys(ctx, anyRows(10))
	if err != nil || len(batch) != 2 || batch[0].Key != "k1" || batch[1].Key != "k1" {
		t.Fatalf("the claim after the first committed leased %+v, %v; want k1's two rows", batch, err)
	}
	if busy := testutil.ToFloat64(b.e.metrics.HeadsClaimsBusy); busy != 1 {
		t.Errorf("outbox_relay_heads_claims_busy_total is %v after a claim that ran; want it still 1", busy)
	}
	if ran := claimsObserved(t, b); ran != 1 {
		t.Errorf("%d claims of heads ran; want the one after the first committed", ran)
	}
}

// claimsObserved returns how many claims m's relay ran to the end
// (outbox_relay_claim_duration_seconds' count).
func claimsObserved(t *testing.T, m *ordered) uint64 {
	t.Helper()
	var out dto.Metric
	if err := m.e.metrics.ClaimDuration.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}

// TestHeadsClaim_AClaimLeftOpenGivesUpTheHeadsLock: a relay frozen after
// its claim of heads and before its commit (the sampled claims read their
// statistics in between) holds the schema's heads lock; the claim's own
// idle_in_transaction_session_timeout (5 s) ends that transaction, so
// another relay's claims of heads take the keys' heads within seconds, not
// once the frozen relay's connection dies.
func TestHeadsClaim_AClaimLeftOpenGivesUpTheHeadsLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	_, a := orderedRelay(t, db)
	_, b := orderedRelayNamed(t, db, "relay-b")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 2) FROM generate_series(0, 3) AS i`)

	frozen := planTx(t, db)
	if ids := claimedIDs(t, frozen, a.claimHeads, a.headsClaimArgs(anyRows(1))); len(ids) != 1 {
		t.Fatalf("the frozen relay's claim leased %v; want k0's head", ids)
	}
	began := time.Now()
	var leased int
	waitfor.Condition(t, 20*time.Second, "another relay's claim of heads to lease rows", func() bool {
		batch, err := b.claimHeadsOfKeys(ctx, anyRows(10))
		if err != nil {
			t.Fatal(err)
		}
		leased = len(batch)
		return leased > 0
	})
	// The frozen claim's transaction ended with nothing committed: both
	// keys' rows are the other relay's.
	if took := time.Since(began); leased != 4 || took > 10*time.Second {
		t.Errorf("the other relay leased %d rows after %s; want all 4, about 5 s after the frozen claim", leased, took.Round(time.Millisecond))
	}
}
