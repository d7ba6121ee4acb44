package relay

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestKeyLookups_StartAtTheIDFloor: under a pinned horizon, a key whose
// 3,000 delivered rows left their dead entries in messages_key_idx, and
// five rows pending. The relay's own floor refreshes put the id floor
// above the dead rows and at or below the pending ones, and the claim's
// lookups of the key's oldest row (partitioned mode's older-row check,
// ordered mode's lane head) start there: the claim reads a fraction of the
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
			pin := db.Conn(t)
			if _, err := pin.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
				t.Fatal(err)
			}
			if _, err := pin.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' FROM generate_series(1, 3000)`)
			var delivered int64
			if err := db.Pool.QueryRow(ctx, "WITH d AS (DELETE FROM "+db.Table("messages")+" RETURNING id) SELECT max(id) FROM d").Scan(&delivered); err != nil {
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
			for r.floor.currentID() == math.MinInt64 && time.Now().Before(deadline) {
				r.floor.found()
				if err := r.refreshFloor(ctx); err != nil {
					t.Fatal(err)
				}
				time.Sleep(floorEvery + 10*time.Millisecond)
			}
			if id := r.floor.currentID(); id <= delivered || id > oldest {
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
					claim, args = m.claimLanes, m.lanesClaimArgs(req)
				}
				args["id_floor"] = idFloor
				before, after := readClaimStats(t, tx, r), claimStats{}
				rows, err := tx.Query(ctx, claim, args)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for rows.Next() {
					n++
				}
				if rows.Close(); rows.Err() != nil {
					t.Fatal(rows.Err())
				}
				if n == 0 {
					t.Fatal("the claim took no row")
				}
				after = readClaimStats(t, tx, r)
				return after.entries - before.entries
			}
			fromFloor, fromSmallest := claimEntries(r.floor.currentID()), claimEntries(math.MinInt64)
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

// readClaimStats reads r's claim statistics (queryClaimStats) in tx.
func readClaimStats(t *testing.T, tx pgx.Tx, r *Relay) claimStats {
	t.Helper()
	var s claimStats
	if err := tx.QueryRow(context.Background(), r.q.claimStats).Scan(&s.entries, &s.buffers); err != nil {
		t.Fatal(err)
	}
	return s
}
