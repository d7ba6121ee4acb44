package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestLookupsByID_CannotUseADueIndex checks the plans of the statements
// that find rows by id (the claim's update, the settles). PostgreSQL once
// read a whole due index (available_at, id) once per settled id to find
// rows by id, because id is one of its columns: it did when ANALYZE had
// last run while the table was nearly empty, as it does most of the day,
// and the index held the dead entries of every row delivered under a
// pinned horizon (a settle of 417 rows read 38,000 buffers and took 1.3 s;
// claims timed out about once a minute). Migration 10 makes the due
// indexes partial, so that only statements that bound available_at can use
// them. The test sets up those statistics and dead entries, and drops the
// primary key inside its transaction, so that a due index would be chosen
// if it were a candidate at all, whatever the costs. In partitioned mode it
// also checks that the claim looks a key's older rows up through
// messages_key_idx and cannot turn to the primary key below an id (the
// lookups of a key's rows name the order (key, id) for that reason).
func TestLookupsByID_CannotUseADueIndex(t *testing.T) {
	for _, mode := range []outbox.Mode{outbox.ModeUnordered, outbox.ModePartitioned} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			db.SetMode(t, mode)
			// Dead entries on the claim's path, kept by a pinned snapshot.
			pin := db.Conn(t)
			if _, err := pin.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
				t.Fatal(err)
			}
			// Its snapshot, without a lock on the table.
			if _, err := pin.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'events.a', 'x' FROM generate_series(1, 3000)`)
			db.Exec(t, `DELETE FROM %s.messages`)
			var floor time.Time
			if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&floor); err != nil {
				t.Fatal(err)
			}
			db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 7) FROM generate_series(1, 300) AS i`)
			// What ANALYZE records of a nearly empty table.
			db.Exec(t, `UPDATE pg_catalog.pg_class SET reltuples = 1, relpages = greatest(pg_relation_size(oid) / 8192, 1)
			             WHERE oid = '%s.messages'::regclass
			                OR oid IN (SELECT indexrelid FROM pg_catalog.pg_index WHERE indrelid = '%s.messages'::regclass)`)

			r, err := New(db.Pool, Config{Schema: db.Name, Mode: mode, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
			if err != nil {
				t.Fatal(err)
			}
			r.floor.at, r.floor.known = floor, true
			// A key's older rows are looked up through messages_key_idx
			// (key, id), never by walking the primary key below an id: with
			// the statistics above, that plan once read 1.3M buffers per
			// claim. Without messages_key_idx, the primary key must still
			// not be a candidate.
			if m, ok := r.mode.(*partitioned); ok {
				args := r.claimArgs(claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}})
				buckets, epochs, shares := everyBucket()
				args["buckets"], args["epochs"], args["shares"] = buckets, epochs, shares
				kt, err := db.Pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := kt.Exec(ctx, "UPDATE "+db.Table("buckets")+" SET owner = $1, epoch = 1, lease_until = now() + interval '1 hour'", r.cfg.ID); err != nil {
					t.Fatal(err)
				}
				if _, err := kt.Exec(ctx, "DROP INDEX "+db.Table("messages_key_idx")); err != nil {
					t.Fatal(err)
				}
				if uses := indexScans(explain(t, kt, m.claims[0], args), "messages_pkey", "id <"); len(uses) > 0 {
					t.Errorf("the claim looks keys' older rows up through %s", uses)
				}
				if err := kt.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			}
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			// Whether a due index is a candidate at all, whatever the costs:
			// without the primary key, a plan would turn to it.
			if _, err := tx.Exec(ctx, "ALTER TABLE "+db.Table("messages")+" DROP CONSTRAINT messages_pkey"); err != nil {
				t.Fatal(err)
			}

			var claim, settle string
			claimArgs := r.claimArgs(claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}})
			var fence pgx.StrictNamedArgs
			switch m := r.mode.(type) {
			case *unordered:
				claim, settle = m.claim, m.settle.archiveOnly
			case *partitioned:
				// Every bucket, as a relay that owns them all.
				if _, err := tx.Exec(ctx, "UPDATE "+db.Table("buckets")+" SET owner = $1, epoch = 1, lease_until = now() + interval '1 hour'", r.cfg.ID); err != nil {
					t.Fatal(err)
				}
				buckets, epochs, shares := everyBucket()
				claim, settle = m.claims[0], m.settle.archiveOnly
				claimArgs["buckets"], claimArgs["epochs"], claimArgs["shares"] = buckets, epochs, shares
				fence = pgx.StrictNamedArgs{"fence_buckets": buckets, "fence_epochs": epochs}
			}
			plan := explain(t, tx, claim, claimArgs)
			if uses := dueIndexScans(plan, "CTE leased"); len(uses) > 0 {
				t.Errorf("the claim's update finds its rows through %s", uses)
			}
			var ids []int64
			var seqs []int32
			var dup []bool
			rows, err := tx.Query(ctx, "SELECT id, claim_seq FROM "+db.Table("messages")+" WHERE leased_by IS NOT NULL")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id int64
				var seq int32
				if err := rows.Scan(&id, &seq); err != nil {
					t.Fatal(err)
				}
				ids, seqs, dup = append(ids, id), append(seqs, seq), append(dup, false)
			}
			if rows.Err() != nil || len(ids) != 300 {
				t.Fatalf("the claim leased %d rows (%v); want 300", len(ids), rows.Err())
			}
			args := pgx.StrictNamedArgs{"archive_ids": ids, "archive_seqs": seqs, "archive_duplicate": dup}
			for k, v := range fence {
				args[k] = v
			}
			if _, ok := r.mode.(*partitioned); ok {
				args["relay_id"] = r.cfg.ID
			}
			plan = explain(t, tx, settle, args)
			if uses := dueIndexScans(plan, ""); len(uses) > 0 {
				t.Errorf("the settle finds its rows through %s", uses)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if n := db.Count(t, "messages"); n != 300 {
				t.Errorf("%d rows after the rollback; want 300", n)
			}
		})
	}
}

// explain runs EXPLAIN (ANALYZE, FORMAT JSON) of sql with args in tx and
// returns the plan's root.
func explain(t *testing.T, tx pgx.Tx, sql string, args pgx.StrictNamedArgs) map[string]any {
	t.Helper()
	var out []map[string]any
	if err := tx.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args).Scan(&out); err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	return out[0]["Plan"].(map[string]any)
}

// dueIndexScans returns the scans of a due index in plan, within the
// subplan named under (the whole plan when empty).
func dueIndexScans(plan map[string]any, under string) []string {
	var found []string
	var walk func(n map[string]any, in bool)
	walk = func(n map[string]any, in bool) {
		if name, _ := n["Subplan Name"].(string); under != "" && name == under {
			in = true
		}
		if index, _ := n["Index Name"].(string); in && strings.Contains(index, "due_idx") && !strings.Contains(index, "unkeyed") {
			found = append(found, fmt.Sprintf("%s %s (%v)", n["Node Type"], index, n["Index Cond"]))
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any), in)
		}
	}
	walk(plan, under == "")
	return found
}

// everyBucket returns the claim arguments of a relay that owns every bucket
// under epoch 1, each with a share of 1000 rows.
func everyBucket() (buckets []int32, epochs []int64, shares []int32) {
	for b := range int32(64) {
		buckets, epochs, shares = append(buckets, b), append(epochs, 1), append(shares, 1000)
	}
	return buckets, epochs, shares
}

// indexScans returns the scans of the index named index in plan whose
// index condition holds cond.
func indexScans(plan map[string]any, index, cond string) []string {
	var found []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if name, _ := n["Index Name"].(string); name == index && strings.Contains(fmt.Sprint(n["Index Cond"]), cond) {
			found = append(found, fmt.Sprintf("%s %s (%v)", n["Node Type"], name, n["Index Cond"]))
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(plan)
	return found
}
