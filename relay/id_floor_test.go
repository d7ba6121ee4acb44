package relay

import (
	"context"
	"github.com/outbox-relay/outbox-relay/relay/internal/sampler"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestKeyLookups_StartAtTheIDFloor: under a pinned horizon, a key whose
// 3,000 delivered rows left their dead entries in messages_key_idx, and
// five rows pending. The relay's own floor refreshes put the id floor
// above the dead rows and at or below the pending ones, and the claim's
// lookups of the key's oldest row (partitioned mode's older-row check,
// ordered mode's heads) start there: the claim reads a fraction of the
// index entries it reads from the smallest id, as the relay's
// outbox_relay_claim_index_entries counts them. (Buffers tell less here:
// the dead rows of one key fill a few heap pages, where under a real load
// they are spread among every other key's.)
func TestKeyLookups_StartAtTheIDFloor(t *testing.T) {
	for _, mode := range []outbox.Mode{outbox.ModePartitioned, outbox.ModeOrdered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			db.SetMode(t, mode)
			pinHorizon(t, db)
			db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' FROM generate_series(1, 3000)`)
			var delivered int64
			if err := db.Pool.QueryRow(ctx, "WITH d AS (DELETE FROM "+db.Table("messages")+" RETURNING id) SELECT max(id) FROM d").Scan(&delivered); err != nil {
				t.Fatal(err)
			}
			// The claims walk their due index from here (the time floor at
			// its best): this test is about the lookups of the key.
			var liveSince time.Time
			if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&liveSince); err != nil {
				t.Fatal(err)
			}
			db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' FROM generate_series(1, 5)`)
			var oldest int64
			if err := db.Pool.QueryRow(ctx, "SELECT min(id) FROM "+db.Table("messages")).Scan(&oldest); err != nil {
				t.Fatal(err)
			}

			r, err := New(db.Pool, Config{Schema: db.Name, Mode: mode, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			idFloor := func() int64 { id, _, _ := r.engine.floor.IDs(); return id }
			for idFloor() == math.MinInt64 && time.Now().Before(deadline) {
				r.floor.Found()
				if err := r.floor.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				time.Sleep(110 * time.Millisecond) // a refresh is due every 100 ms while claims find rows
			}
			if id := idFloor(); id <= delivered || id > oldest {
				t.Fatalf("id floor = %d, want above the delivered rows (%d) and at most the oldest pending row (%d)", id, delivered, oldest)
			}

			claimEntries := func(idFloor int64) int64 {
				t.Helper()
				tx := planTx(t, db)
				defer func() { _ = tx.Rollback(ctx) }() // the next claim takes the same rows
				var claim string
				var args pgx.StrictNamedArgs
				req := claimRequest{limit: 100, bytes: 1 << 30, closed: []string{}}
				switch m := r.mode.(type) {
				case *partitioned:
					claim, _, args, _ = lookupStatements(t, tx, db, r)
				case *ordered:
					claim, args = m.claimHeads, m.headsClaimArgs(req)
				}
				args["id_floor"] = idFloor
				args["floor"] = liveSince
				// The floor's refreshes list every transaction in progress
				// in the database, other tests' among them; one of those
				// that ends sends a claim's lookups back to the smallest id
				// (TestKeyLookups_AWriterTheIDFloorPassedIsNotOvertaken),
				// which is not what this test measures.
				args["passed_writers"], args["passed_ids"] = []string{}, []int64{}
				before := readClaimStats(t, tx, r)
				if len(claimedIDs(t, tx, claim, args)) == 0 {
					t.Fatal("the claim took no row")
				}
				after := readClaimStats(t, tx, r)
				return after.entries - before.entries
			}
			fromFloor, fromSmallest := claimEntries(idFloor()), claimEntries(math.MinInt64)
			t.Logf("claim index entries: %d from the id floor, %d from the smallest id", fromFloor, fromSmallest)
			if fromSmallest < 3000 {
				t.Fatalf("from the smallest id the claim read %d index entries: the dead entries are not on its path, the test proves nothing", fromSmallest)
			}
			if fromFloor*10 > fromSmallest {
				t.Errorf("from the id floor the claim read %d index entries, from the smallest id %d: want a tenth at most", fromFloor, fromSmallest)
			}
		})
	}
}

// claimStats is one reading of the claim statistics (sampler.Statement).
type claimStats struct{ entries, buffers int64 }

// readClaimStats reads r's claim statistics (sampler.Statement) in tx.
func readClaimStats(t *testing.T, tx pgx.Tx, r *Relay) claimStats {
	t.Helper()
	var s claimStats
	if err := tx.QueryRow(context.Background(), sampler.Statement(outbox.QuoteSchema(r.cfg.Schema))).Scan(&s.entries, &s.buffers); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKeyLookups_AWriterTheIDFloorPassedIsNotOvertaken: a writer open for
// longer than the floor's patience, which the id floor passed, commits its
// row of key k; then a producer writes a later row of k. Before the next
// refresh sends the floor back, a claim sees the writer ended (it is among
// the transactions the floor passed) and looks k up from the smallest id:
// it takes the writer's row, or holds k back, never the later row first.
func TestKeyLookups_AWriterTheIDFloorPassedIsNotOvertaken(t *testing.T) {
	for _, mode := range []outbox.Mode{outbox.ModePartitioned, outbox.ModeOrdered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			db.SetMode(t, mode)
			writer := db.Conn(t)
			tx, err := writer.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var first int64
			var xid string
			if err := tx.QueryRow(ctx, "INSERT INTO "+db.Table("messages")+" (topic, payload, key) VALUES ('events.a', 'first', 'k') RETURNING id, pg_current_xact_id()::text").Scan(&first, &xid); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var floor time.Time
			if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&floor); err != nil {
				t.Fatal(err)
			}
			var later int64
			if err := db.Pool.QueryRow(ctx, "INSERT INTO "+db.Table("messages")+" (topic, payload, key) VALUES ('events.a', 'later', 'k') RETURNING id").Scan(&later); err != nil {
				t.Fatal(err)
			}
			r, err := New(db.Pool, Config{Schema: db.Name, Mode: mode, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
			if err != nil {
				t.Fatal(err)
			}
			// The last refresh ran while the writer was open and old: both
			// floors passed its row.
			r.engine.floor.Set(floor, first+1, []string{xid}, []int64{first})

			claimed := func(passed []string) []int64 {
				t.Helper()
				passedIDs := make([]int64, len(passed))
				for i := range passed {
					passedIDs[i] = first
				}
				r.engine.floor.Set(floor, first+1, passed, passedIDs)
				ptx := planTx(t, db)
				defer func() { _ = ptx.Rollback(ctx) }()
				var claim string
				var args pgx.StrictNamedArgs
				switch m := r.mode.(type) {
				case *partitioned:
					claim, _, args, _ = lookupStatements(t, ptx, db, r)
				case *ordered:
					claim, args = m.claimHeads, m.headsClaimArgs(claimRequest{limit: 100, bytes: 1 << 30, closed: []string{}})
				}
				return claimedIDs(t, ptx, claim, args)
			}
			// (Ordered mode may take both, the writer's row first, as a run.)
			if ids := claimed([]string{xid}); slices.Contains(ids, later) && !slices.Contains(ids, first) {
				t.Errorf("the claim took %v: the writer's row is %d, the later row %d", ids, first, later)
			}
			// Without the writer among those the floor passed, the lookup
			// starts above its row: the later row goes first. (What the
			// check above guards against.)
			if ids := claimed([]string{}); !slices.Contains(ids, later) {
				t.Errorf("from the id floor alone the claim took %v, want the later row %d: the test proves nothing", ids, later)
			}
		})
	}
}
