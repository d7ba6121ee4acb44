package relay

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// unorderedRelay returns a relay of the default mode on db whose claims
// the test runs itself.
func unorderedRelay(t *testing.T, db *dbtest.Schema) (*Relay, *unordered) {
	t.Helper()
	r, err := New(db.Pool, Config{
		Schema: db.Name, ID: "relay-a", Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, r.mode.(*unordered)
}

// claimIDs runs one claim of m for up to limit rows and returns the ids it
// leased.
func claimIDs(t *testing.T, m *unordered, limit int) []int64 {
	t.Helper()
	batch, err := m.claimRows(context.Background(), claimRequest{limit: limit, bytes: 1 << 30, oversized: true, closed: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(batch))
	for i := range batch {
		ids[i] = batch[i].ID
	}
	return ids
}

// TestClaimCursor_RowsBelowItAreClaimedByTheNextWalkFromTheFloor: while
// claims come back full, the next one starts where the last one ended, and
// a row below that place (here one whose lease ran out) is claimed by the
// next claim that walks from the claim floor: after cursorFloorEvery, or
// at once after a claim that did not come back full.
func TestClaimCursor_RowsBelowItAreClaimedByTheNextWalkFromTheFloor(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, m := unorderedRelay(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'events.a', 'x' FROM generate_series(1, 30)`)
	expire := func(id int64) {
		t.Helper()
		db.Exec(t, `UPDATE %s.messages SET leased_until = now() - interval '1 second' WHERE id = `+strconv.FormatInt(id, 10))
	}

	first := claimIDs(t, m, 10)
	if len(first) != 10 {
		t.Fatalf("the first claim took %d rows, want 10", len(first))
	}
	expire(first[0])
	m.cursor.walked = time.Now() // the first claim walked from the floor just now
	second := claimIDs(t, m, 10)
	if len(second) != 10 || slices.Contains(second, first[0]) || second[0] < first[9] {
		t.Fatalf("a claim after a full one took %v; want the 10 rows after %d, not %d below it", second, first[9], first[0])
	}
	m.cursor.walked = time.Now().Add(-cursorFloorEvery)
	third := claimIDs(t, m, 10)
	if len(third) != 10 || third[0] != first[0] {
		t.Fatalf("the claim after cursorFloorEvery took %v; want the row whose lease ran out (%d) first", third, first[0])
	}

	// The last rows: a claim that does not come back full, and the next
	// one walks from the floor at once.
	rest := claimIDs(t, m, 100)
	if len(rest) != 1 {
		t.Fatalf("the last claim took %v, want the one row left", rest)
	}
	expire(second[0])
	m.cursor.walked = time.Now()
	if again := claimIDs(t, m, 100); !slices.Equal(again, []int64{second[0]}) {
		t.Fatalf("the claim after one that was not full took %v; want the row whose lease ran out (%d)", again, second[0])
	}
}

// TestClaimCursor_ADrainingClaimWalksPastNoRowInFlight: with 3,000 rows in
// flight, a claim of 1,000 more that starts at the cursor reads the due
// index's entries of the rows it takes, where one from the floor reads
// those of every row in flight first.
func TestClaimCursor_ADrainingClaimWalksPastNoRowInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	r, m := unorderedRelay(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'events.a', 'x' FROM generate_series(1, 4000)`)
	for range 3 {
		m.cursor.walked = time.Now()
		if ids := claimIDs(t, m, 1000); len(ids) != 1000 {
			t.Fatalf("a claim took %d rows, want 1000", len(ids))
		}
	}
	req := claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}}
	read := func(args func() pgx.StrictNamedArgs) (n int, entries int64) {
		t.Helper()
		tx := planTx(t, db)
		if _, err := tx.Exec(ctx, r.engine.claims.plan); err != nil { // the claims' generic plan
			t.Fatal(err)
		}
		returned := func() int64 { return indexEntriesRead(t, tx, db.Table("messages_due_idx")) }
		before := returned()
		n = len(claimedIDs(t, tx, m.claim, args()))
		entries = returned() - before
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		return n, entries
	}
	n, past := read(func() pgx.StrictNamedArgs {
		m.cursor.walked = time.Now() // a claim walked from the floor just now
		return r.engine.claims.messagesClaimArgs(req, &m.cursor)
	})
	if n != 1000 {
		t.Fatalf("the claim from the cursor took %d rows, want 1000", n)
	}
	n, fromFloor := read(func() pgx.StrictNamedArgs { return r.engine.claims.messagesClaimArgs(req, nil) })
	if n != 1000 {
		t.Fatalf("the claim from the floor took %d rows, want 1000", n)
	}
	t.Logf("index entries read: %d from the cursor, %d from the floor", past, fromFloor)
	if past > 1100 || fromFloor < 4000 {
		t.Errorf("a claim of 1,000 rows read %d entries of messages_due_idx from the cursor and %d from the floor; want about 1,000 and 4,000", past, fromFloor)
	}
}

// TestClaimCursor_AWalkFromTheFloorTakesARowAtTheFloorWhateverItsID: a
// walk from the claim floor starts at the floor's time and the smallest id,
// that place included: a row written without the insert guard at the
// floor's time with the smallest id there is (the oldest row, so the floor
// comes to rest at its time) is claimed, not passed for ever.
func TestClaimCursor_AWalkFromTheFloorTakesARowAtTheFloorWhateverItsID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	r, m := unorderedRelay(t, db)
	db.ExecAsRelay(t, `INSERT INTO %s.messages (id, topic, payload, available_at) VALUES
	    (-9223372036854775808, 'events.a', 'x', now() - interval '1 minute')`)
	var at time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT available_at FROM "+db.Table("messages")).Scan(&at); err != nil {
		t.Fatal(err)
	}
	r.engine.floor.Set(at, math.MinInt64, nil, nil)
	if ids := claimIDs(t, m, 10); !slices.Equal(ids, []int64{math.MinInt64}) {
		t.Errorf("a claim from the floor at the row's time took %v, want the row", ids)
	}
}
