package relay

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// The plans of lookups by id and by key, with the statistics ANALYZE leaves
// when it last ran while the table was nearly empty (as it does most of
// the day) and the dead entries a pinned horizon keeps. With them
// PostgreSQL once read a whole due index (available_at, id) once per
// settled id to find rows by id (a settle of 417 rows read 38,000 buffers
// and took 1.3 s; claims timed out about once a minute), and walked the
// primary key below each row's id to find a key's older rows (1.3M buffers
// per partitioned claim). Each test drops the index the statement should
// use inside its transaction, so that the wrong one would be chosen if it
// were a candidate at all, whatever the costs.

// TestLookupsByID_CannotUseADueIndex: the claim's update and the settle
// cannot find rows by id through a due index. Migration 10 makes the due
// indexes partial, so that only statements that bound available_at can use
// them.
func TestLookupsByID_CannotUseADueIndex(t *testing.T) {
	for _, mode := range []outbox.Mode{outbox.ModeUnordered, outbox.ModePartitioned} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, r := staleStatistics(t, mode)
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "ALTER TABLE "+db.Table("messages")+" DROP CONSTRAINT messages_pkey"); err != nil {
				t.Fatal(err)
			}
			claim, settle, claimArgs, fence := lookupStatements(t, tx, db, r)
			isDue := func(index string) bool {
				return strings.Contains(index, "due_idx") && !strings.Contains(index, "unkeyed")
			}
			if uses := leaseIndexScans(explain(t, tx, claim, claimArgs), isDue); len(uses) > 0 {
				t.Errorf("the claim's update finds its rows through %s", uses)
			}
			ids, seqs := leasedRows(t, tx, db)
			dup := make([]bool, len(ids))
			if len(ids) != 300 {
				t.Fatalf("the claim leased %d rows; want 300", len(ids))
			}
			args := pgx.StrictNamedArgs{"archive_ids": ids, "archive_seqs": seqs, "archive_duplicate": dup}
			for k, v := range fence {
				args[k] = v
			}
			if uses := indexScans(explain(t, tx, settle, args), "", isDue); len(uses) > 0 {
				t.Errorf("the settle finds its rows through %s", uses)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if n := db.Count(t, "messages_all"); n != 300 {
				t.Errorf("%d rows after the rollback; want 300", n)
			}
		})
	}
}

// TestKeyLookups_CannotWalkThePrimaryKey: a partitioned claim looks a key's
// older rows, and its held keys' oldest rows, up through messages_key_idx
// (key, id) and cannot turn to the primary key, below an id or in id
// order, nor to messages_due_idx: the lookups of a key's rows bound the key
// in row comparisons and name the order (key, id), which the primary key
// cannot give, and find heads by id with their due time in a row
// comparison.
func TestKeyLookups_CannotWalkThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := staleStatistics(t, outbox.ModePartitioned)
	tx := planTx(t, db)
	if _, err := tx.Exec(ctx, "DROP INDEX "+db.Table("messages_key_idx")); err != nil {
		t.Fatal(err)
	}
	claim, _, claimArgs, _ := lookupStatements(t, tx, db, r)
	// The claim with held keys too: it looks their oldest rows up.
	withHeld := pgx.StrictNamedArgs{"held_keys": []string{"k1", "k2"}}
	for k, v := range claimArgs {
		withHeld[k] = v
	}
	unbounded := func(index string) bool { return index == "messages_pkey" || index == "messages_due_idx" }
	for _, plan := range []map[string]any{
		explain(t, tx, claim, claimArgs),
		explain(t, tx, r.mode.(*partitioned).claims[1], withHeld),
	} {
		for _, use := range indexScans(plan, "", unbounded) {
			// The primary key only finds rows by id (id = ...).
			if !strings.Contains(use, "(id =") || strings.Contains(use, "messages_due_idx") {
				t.Errorf("the claim looks keys' rows up through %s", use)
			}
		}
	}
}

// TestKeyLookups_OrderedHeadsCannotWalkThePrimaryKey: ordered mode's claim
// finds each key's oldest row through messages_key_idx, and without it
// cannot turn to the primary key in id order.
func TestKeyLookups_OrderedHeadsCannotWalkThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := staleStatistics(t, outbox.ModeOrdered)
	tx := planTx(t, db)
	m := r.mode.(*ordered)
	claim, args := m.claimHeads, m.headsClaimArgs(claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}})
	if uses := indexScans(explain(t, tx, claim, args), "CTE oldest", indexNamed("messages_key_idx")); len(uses) == 0 {
		t.Errorf("the claim does not find heads through messages_key_idx")
	}
	if _, err := tx.Exec(ctx, "DROP INDEX "+db.Table("messages_key_idx")); err != nil {
		t.Fatal(err)
	}
	for _, use := range indexScans(explain(t, tx, claim, args), "CTE oldest", indexNamed("messages_pkey")) {
		t.Errorf("the claim finds heads through %s", use)
	}
}

// TestBlockedKeysGauge_WalksTheRetryIndex: ordered mode's count of keys
// whose head failed finds those heads through messages_retry_idx (rows
// that failed), not through messages_key_idx (every keyed row, and under a
// pinned horizon every version of one).
func TestBlockedKeysGauge_WalksTheRetryIndex(t *testing.T) {
	t.Parallel()
	db, r := staleStatistics(t, outbox.ModeOrdered)
	tx := planTx(t, db)
	args := pgx.StrictNamedArgs{"heads_cap": blockedKeysCap, "cap": gaugeCountCap}
	plan := explain(t, tx, r.mode.(*ordered).blocked, args)
	if uses := indexScans(plan, "", indexNamed("messages_retry_idx")); len(uses) == 0 {
		t.Errorf("the count of blocked keys does not walk messages_retry_idx")
	}
	for _, use := range indexScans(plan, "", func(index string) bool {
		return index != "" && index != "messages_retry_idx" && index != "messages_waiting_idx"
	}) {
		t.Errorf("the count of blocked keys walks %s", use)
	}
}

// TestKeyLookups_PromotionsWalkTheWaitingIndex: the settle's promotion of
// the next rows of ordered keys looks them up in messages_waiting_idx,
// which holds only waiting rows, not in messages_key_idx (every row of the
// key) nor the primary key.
func TestKeyLookups_PromotionsWalkTheWaitingIndex(t *testing.T) {
	t.Parallel()
	db, r := staleStatistics(t, outbox.ModeOrdered)
	tx := planTx(t, db)
	args := pgx.StrictNamedArgs{"keys": []string{"k1", "k2", "k3"}, "after": []int64{1, 1, 1}}
	plan := explain(t, tx, r.settler.sql.then, args)
	if uses := indexScans(plan, "", indexNamed("messages_waiting_idx")); len(uses) == 0 {
		t.Errorf("the promotion does not look the waiting rows up in messages_waiting_idx")
	}
	for _, use := range indexScans(plan, "", func(index string) bool { return index == "messages_key_idx" || index == "messages_due_idx" }) {
		t.Errorf("the promotion walks %s", use)
	}
	// The rows it promotes it updates through the primary key: a scan of
	// messages_waiting_idx without a condition reads every entry a pinned
	// horizon kept of every row ever marked waiting (3.5k buffers a
	// settle, seven minutes into a pin, most of the pinned database's time).
	for _, use := range indexScans(plan, "", indexNamed("messages_waiting_idx")) {
		if strings.HasSuffix(use, "(<nil>)") {
			t.Errorf("the promotion walks the whole waiting index: %s", use)
		}
	}
	if uses := indexScans(plan, "", indexNamed("messages_pkey")); len(uses) == 0 {
		t.Errorf("the promotion does not update its rows through the primary key")
	}
}

// TestKeyLookups_UseTheirIndexWithFreshStatistics: with statistics of a
// table that holds what it holds (1,000 keys, three rows each), the
// older-row check goes through messages_key_idx, not through the whole
// table once per claimed row.
func TestKeyLookups_UseTheirIndexWithFreshStatistics(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModePartitioned)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 1000) FROM generate_series(1, 3000) AS i`)
	db.Exec(t, `ANALYZE %s.messages`)
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModePartitioned, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	tx := planTx(t, db)
	claim, _, claimArgs, _ := lookupStatements(t, tx, db, r)
	claimArgs["limit"] = 100
	plan := explain(t, tx, claim, claimArgs)
	if uses := indexScans(plan, "CTE outside", indexNamed("messages_key_idx")); len(uses) == 0 {
		t.Errorf("the older-row check does not use messages_key_idx")
	}
	for _, node := range seqScans(plan, "CTE outside") {
		t.Errorf("the older-row check reads the whole table: %s", node)
	}
}

// seqScans returns the sequential scans in plan, with their relations,
// within the subplan named under (the whole plan when empty), but those of
// messages_all: the parent of the hot table's generations (migration 24)
// holds no row (its CHECK (false)); a statement that reads the rows through
// it with no condition on a column (migration 26) still scans it, for
// nothing, beside each generation's table, whose scans count.
func seqScans(plan map[string]any, under string) []string {
	var found []string
	var walk func(n map[string]any, in bool)
	walk = func(n map[string]any, in bool) {
		if name, _ := n["Subplan Name"].(string); under != "" && name == under {
			in = true
		}
		if rel, _ := n["Relation Name"].(string); in && n["Node Type"] == "Seq Scan" && rel != "messages_all" {
			found = append(found, fmt.Sprintf("Seq Scan on %s (%v rows, %v loops)", rel, n["Actual Rows"], n["Actual Loops"]))
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any), in)
		}
	}
	walk(plan, under == "")
	return found
}

// TestBucketWalk_CannotUseTheSharedDueIndex: a partitioned claim walks each
// bucket through messages_bucket_due_idx, and cannot turn to
// messages_due_idx with the bucket as a filter, which walks the whole due
// range once per bucket (migration 11).
func TestBucketWalk_CannotUseTheSharedDueIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := staleStatistics(t, outbox.ModePartitioned)
	tx := planTx(t, db)
	claim, _, claimArgs, _ := lookupStatements(t, tx, db, r)
	if uses := indexScans(explain(t, tx, claim, claimArgs), "CTE due", indexNamed("messages_bucket_due_idx")); len(uses) == 0 {
		t.Errorf("the walk does not use messages_bucket_due_idx")
	}
	if _, err := tx.Exec(ctx, "DROP INDEX "+db.Table("messages_bucket_due_idx")); err != nil {
		t.Fatal(err)
	}
	if uses := indexScans(explain(t, tx, claim, claimArgs), "CTE due", indexNamed("messages_due_idx")); len(uses) > 0 {
		t.Errorf("the walk goes through %s", uses)
	}
}

// TestBucketWalk_StartsAtTheFloor: under a pinned horizon, 200,000 rows
// delivered before the claim floor left their dead entries in
// messages_bucket_due_idx. Each bucket's walk starts at the floor, not at
// the bucket's first entry: a claim reads a few pages of the index per
// bucket (its descent), not all of them.
func TestBucketWalk_StartsAtTheFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModePartitioned)
	pinHorizon(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 1000) FROM generate_series(1, 200000) AS i`)
	db.Exec(t, `DELETE FROM %s.messages`)
	var floor time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&floor); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || i FROM generate_series(1, 100) AS i`)
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModePartitioned, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	r.engine.floor.Set(floor, math.MinInt64, nil, nil)

	tx := planTx(t, db)
	claim, _, claimArgs, _ := lookupStatements(t, tx, db, r)
	n, fetched, pages := claimReading(t, tx, db.Name+".messages_bucket_due_idx", claim, claimArgs)
	t.Logf("the claim took %d rows and read %d pages of the bucket index (%d pages)", n, fetched, pages)
	if n != 100 {
		t.Errorf("the claim took %d rows, want 100", n)
	}
	if fetched*3 > pages {
		t.Errorf("the claim read %d of the bucket index's %d pages: its walks start below the floor", fetched, pages)
	}
}

// TestBucketWalk_ReadsOnlyEachBucketsShare: in a burst (every row due at
// one timestamp) with fresh statistics, a claim that takes one row from
// each of 16 buckets reads about one heap page per row, not every row of
// its buckets: each walk follows messages_bucket_due_idx in its order and
// stops at the bucket's share. Ordered by (available_at, id) alone, the
// walks read their whole buckets in bitmap scans and sorted them (a
// partitioned 200k burst drained at half the unordered rate).
func TestBucketWalk_ReadsOnlyEachBucketsShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModePartitioned)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, available_at) SELECT 'events.a', 'x', now() - interval '1 minute' FROM generate_series(1, 20000)`)
	db.Exec(t, `ANALYZE %s.messages`)
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModePartitioned, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	tx := planTx(t, db)
	if _, err := tx.Exec(ctx, "UPDATE "+db.Table("buckets")+" SET owner = $1, epoch = 1, lease_until = now() + interval '1 hour'", r.cfg.ID); err != nil {
		t.Fatal(err)
	}
	var buckets, shares []int32
	var epochs []int64
	for b := range int32(16) {
		buckets, epochs, shares = append(buckets, b), append(epochs, 1), append(shares, 1)
	}
	m := r.mode.(*partitioned)
	args := m.bucketsClaimArgs(claimRequest{limit: 16, bytes: 1 << 30, closed: []string{}}, buckets, epochs, shares)
	n, fetched, pages := claimReading(t, tx, db.Table("messages"), m.claims[0], args)
	t.Logf("the claim took %d rows and read %d heap pages (the table has %d)", n, fetched, pages)
	if n != 16 {
		t.Errorf("the claim took %d rows, want 16", n)
	}
	if fetched*3 > pages {
		t.Errorf("the claim read %d heap pages for 16 rows (the table has %d): its walks read their whole buckets", fetched, pages)
	}
}

// TestClaims_ReadOnlyTheirRowsInABurst: in a burst (every row due at one
// timestamp) with fresh statistics, a claim of 16 rows reads about as many
// heap pages as it takes rows in every mode, not the burst: the walk that
// found the partitioned claims reading their buckets whole
// (TestBucketWalk_ReadsOnlyEachBucketsShare), for the claims of the other
// modes. In ordered mode the rows have 16 keys, so that the claim's heads
// are 16 rows.
func TestClaims_ReadOnlyTheirRowsInABurst(t *testing.T) {
	for _, mode := range []outbox.Mode{outbox.ModeUnordered, outbox.ModeOrdered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			db.SetMode(t, mode)
			db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, available_at)
			            SELECT 'events.a', 'x', 'k' || (i % 16), now() - interval '1 minute' FROM generate_series(1, 20000) AS i`)
			db.Exec(t, `ANALYZE %s.messages`)
			r, err := New(db.Pool, Config{Schema: db.Name, Mode: mode, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
			if err != nil {
				t.Fatal(err)
			}
			req := claimRequest{limit: 16, bytes: 1 << 30, closed: []string{}}
			var claim string
			var args pgx.StrictNamedArgs
			switch m := r.mode.(type) {
			case *unordered:
				claim, args = m.claim, r.engine.claims.messagesClaimArgs(req, nil)
			case *ordered:
				claim, args = m.claimHeads, m.headsClaimArgs(req)
			}
			n, fetched, pages := claimReading(t, planTx(t, db), db.Table("messages"), claim, args)
			t.Logf("the claim took %d rows and read %d heap pages (the table has %d)", n, fetched, pages)
			if n == 0 {
				t.Fatal("the claim took no row")
			}
			if fetched*3 > pages {
				t.Errorf("the claim read %d heap pages for %d rows (the table has %d)", fetched, n, pages)
			}
		})
	}
}

// staleStatistics returns a schema in mode whose due indexes hold the dead
// entries of 3,000 deleted rows, kept by a pinned snapshot, and 300 due
// rows over 7 keys, with the statistics of a nearly empty table; and a
// relay of it whose floor lies above the dead entries.
func staleStatistics(t *testing.T, mode outbox.Mode) (*dbtest.Schema, *Relay) {
	t.Helper()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, mode)
	pinHorizon(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'events.a', 'x' FROM generate_series(1, 3000)`)
	db.Exec(t, `DELETE FROM %s.messages`)
	var floor time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&floor); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 7) FROM generate_series(1, 300) AS i`)
	db.Exec(t, `UPDATE pg_catalog.pg_class SET reltuples = 1, relpages = greatest(pg_relation_size(oid) / 8192, 1)
	             WHERE oid = '%s.messages'::regclass
	                OR oid IN (SELECT indexrelid FROM pg_catalog.pg_index WHERE indrelid = '%s.messages'::regclass)`)
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: mode, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	r.engine.floor.Set(floor, math.MinInt64, nil, nil)
	return db, r
}

// lookupStatements returns r's claim and archiving settle, the claim's
// arguments and the settle's fence arguments; in partitioned mode r owns
// every bucket (in tx) under epoch 1, each with a share of 1000 rows.
func lookupStatements(t *testing.T, tx pgx.Tx, db *dbtest.Schema, r *Relay) (claim, settle string, claimArgs, fence pgx.StrictNamedArgs) {
	t.Helper()
	req := claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}}
	switch m := r.mode.(type) {
	case *unordered:
		claimArgs = r.engine.claims.messagesClaimArgs(req, nil)
		return m.claim, m.settle.archiveOnly, claimArgs, nil
	case *partitioned:
		claimArgs, fence = ownEveryBucket(t, tx, db, r, m, req)
		return m.claims[0], m.settle.archiveOnly, claimArgs, fence
	}
	t.Fatalf("no statements for mode %T", r.mode)
	return "", "", nil, nil
}

// ownEveryBucket makes r the owner of all 64 buckets of db, under epoch 1
// for an hour, through exec (a transaction, or the pool to commit it), and
// returns the arguments of m's claim for req over them, each bucket's
// share 1,000 rows, and the fence arguments of its settles.
func ownEveryBucket(t *testing.T, exec interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, db *dbtest.Schema, r *Relay, m *partitioned, req claimRequest) (claimArgs, fence pgx.StrictNamedArgs) {
	t.Helper()
	if _, err := exec.Exec(context.Background(), "UPDATE "+db.Table("buckets")+" SET owner = $1, epoch = 1, lease_until = now() + interval '1 hour'", r.cfg.ID); err != nil {
		t.Fatal(err)
	}
	var buckets, shares []int32
	var epochs []int64
	for b := range int32(64) {
		buckets, epochs, shares = append(buckets, b), append(epochs, 1), append(shares, 1000)
	}
	claimArgs = m.bucketsClaimArgs(req, buckets, epochs, shares)
	fence = pgx.StrictNamedArgs{"relay_id": r.cfg.ID, "fence_buckets": buckets, "fence_epochs": epochs}
	return claimArgs, fence
}

// pinHorizon opens a session on db that holds a REPEATABLE READ snapshot,
// without a lock on any table, until the test ends: nothing deleted from
// then on can be removed.
func pinHorizon(t *testing.T, db *dbtest.Schema) {
	t.Helper()
	ctx := context.Background()
	pin := db.Conn(t)
	if _, err := pin.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := pin.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}

// claimReading runs the claim statement claim with args in tx (claimedIDs)
// and returns how many rows it leased, how many blocks of the relation rel
// it fetched, and how many pages rel has.
func claimReading(t *testing.T, tx pgx.Tx, rel, claim string, args pgx.StrictNamedArgs) (n int, fetched, pages int64) {
	t.Helper()
	ctx := context.Background()
	fetchedNow := func() int64 {
		t.Helper()
		var blocks int64
		if err := tx.QueryRow(ctx, "SELECT pg_stat_get_xact_blocks_fetched($1::regclass)", rel).Scan(&blocks); err != nil {
			t.Fatal(err)
		}
		return blocks
	}
	if err := tx.QueryRow(ctx, "SELECT pg_relation_size($1::regclass) / 8192", rel).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	before := fetchedNow()
	n = len(claimedIDs(t, tx, claim, args))
	return n, fetchedNow() - before, pages
}

// claimedIDs runs the claim statement claim with args in tx and returns
// the ids of the rows it leased (not its rows of held or empty keys).
func claimedIDs(t *testing.T, tx pgx.Tx, claim string, args pgx.StrictNamedArgs) []int64 {
	t.Helper()
	rows, err := tx.Query(context.Background(), claim, args)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		if v, _ := rows.Values(); v[0] != nil {
			ids = append(ids, v[0].(int64))
		}
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return ids
}

// indexEntriesRead returns how many entries of the index (a qualified
// name) scans in tx's transaction have read so far.
func indexEntriesRead(t *testing.T, tx pgx.Tx, index string) (n int64) {
	t.Helper()
	if err := tx.QueryRow(context.Background(), "SELECT pg_stat_get_xact_tuples_returned($1::regclass)", index).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// planTx begins a transaction on db's pool for a plan test, rolled back
// when the test ends: what the test drops or updates in it never lands.
func planTx(t *testing.T, db *dbtest.Schema) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}

// indexNamed matches the scans of the index name for indexScans ("": the
// nodes that scan no index).
func indexNamed(name string) func(string) bool {
	return func(index string) bool { return index == name }
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

// eachPlanNode calls fn for plan and each node under it.
func eachPlanNode(plan map[string]any, fn func(n map[string]any)) {
	fn(plan)
	children, _ := plan["Plans"].([]any)
	for _, c := range children {
		eachPlanNode(c.(map[string]any), fn)
	}
}

// cteScansOver returns the scans in plan of the statement's own results
// (CTE Scan nodes) that ran more than most times, with their loops.
func cteScansOver(plan map[string]any, most float64) []string {
	var scans []string
	eachPlanNode(plan, func(n map[string]any) {
		if loops, _ := n["Actual Loops"].(float64); n["Node Type"] == "CTE Scan" && loops > most {
			scans = append(scans, fmt.Sprintf("%v (%v loops)", n["CTE Name"], loops))
		}
	})
	return scans
}

// indexScans returns the scans in plan of the indexes match accepts,
// with their index conditions, within the subplan named under (the whole
// plan when empty).
func indexScans(plan map[string]any, under string, match func(index string) bool) []string {
	var found []string
	var walk func(n map[string]any, in bool)
	walk = func(n map[string]any, in bool) {
		if name, _ := n["Subplan Name"].(string); under != "" && name == under {
			in = true
		}
		if index, _ := n["Index Name"].(string); in && match(index) {
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

// leaseIndexScans returns the scans of the indexes match accepts by which
// the claim's update (plan's Update node, at its root or in a CTE) finds
// the rows it leases, leaving out the CTEs the update reads (the walk of
// the due rows).
func leaseIndexScans(plan map[string]any, match func(index string) bool) []string {
	var update map[string]any
	eachPlanNode(plan, func(n map[string]any) {
		if n["Node Type"] == "ModifyTable" && n["Operation"] == "Update" && update == nil {
			update = n
		}
	})
	if update == nil {
		return []string{"no Update node in the plan"}
	}
	var found []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if name, _ := n["Subplan Name"].(string); strings.HasPrefix(name, "CTE ") {
			return
		}
		if index, _ := n["Index Name"].(string); match(index) {
			found = append(found, fmt.Sprintf("%s %s (%v)", n["Node Type"], index, n["Index Cond"]))
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(update)
	return found
}

// TestBucketsClaim_KeepsAndHoldsInOnePass: a partitioned claim of 1,000
// rows over 1,000 keys, one of them held back by an older row of its key
// in flight. It keeps the rows and holds keys back in one pass over its
// keys: no scan of its own results (a CTE) runs more than a few times, and
// it leases the 999 rows no older row holds back. (A join of the claimed
// rows with their keys' oldest rows, and a lookup of each key's newest
// claimed row, ran as nested loops: 1,000 scans of 1,000 rows each, and a
// second per claim.)
func TestBucketsClaim_KeepsAndHoldsInOnePass(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModePartitioned)
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModePartitioned, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, key, leased_by, leased_until) VALUES ('events.a', 'x', 'k7', 'another', now() + interval '1 minute')`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || i FROM generate_series(0, 999) AS i`)
	tx := planTx(t, db)
	claim, _, args, _ := lookupStatements(t, tx, db, r)
	if scans := cteScansOver(explain(t, tx, claim, args), 3); len(scans) > 0 {
		t.Errorf("a claim of 1,000 rows over 1,000 keys scanned its own results over and over: %v", scans)
	}
	var leased, held int
	if err := tx.QueryRow(context.Background(), "SELECT count(*) FILTER (WHERE leased_by = $1), count(*) FILTER (WHERE key = 'k7' AND leased_by IS NULL) FROM "+db.Table("messages"), r.cfg.ID).Scan(&leased, &held); err != nil {
		t.Fatal(err)
	}
	if leased != 999 || held != 1 {
		t.Errorf("the claim leased %d rows and left %d of k7 behind its row in flight; want 999 and 1", leased, held)
	}
}

// TestBucketsClaim_OlderRowCheckStopsAtTheIDFloor: under a pinned
// horizon, with 20,000 delivered rows of each of 10 keys left dead in the
// hot table, a partitioned claim of one new row per key reads a few pages
// of messages_key_idx per key, not the dead rows' entries. Its backward
// probe for a key's live row before the claim (outside) went on below the
// id floor through every entry of the key (PostgreSQL ends a scan on a row
// comparison only where its first column decides): 831 blocks of the
// index's 778 here against 60 now, and 0.7-1.2 ms a key after ten minutes
// of a pin at 1,000 rows/s; a forward lookup from the id floor now runs it
// only when the key has a live row before the claim.
func TestBucketsClaim_OlderRowCheckStopsAtTheIDFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModePartitioned)
	pinHorizon(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i % 10) FROM generate_series(1, 200000) AS i`)
	db.Exec(t, `DELETE FROM %s.messages`)
	var floorAt time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&floorAt); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || i FROM generate_series(0, 9) AS i`)
	var idFloor int64
	if err := db.Pool.QueryRow(ctx, "SELECT min(id) FROM "+db.Table("messages")).Scan(&idFloor); err != nil {
		t.Fatal(err)
	}
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModePartitioned, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	r.engine.floor.Set(floorAt, idFloor, nil, nil)
	tx := planTx(t, db)
	claim, _, args, _ := lookupStatements(t, tx, db, r)
	n, fetched, pages := claimReading(t, tx, db.Table("messages_key_idx"), claim, args)
	t.Logf("the claim took %d rows and fetched %d blocks of messages_key_idx (%d pages)", n, fetched, pages)
	if n != 10 {
		t.Errorf("the claim took %d rows, want 10", n)
	}
	if fetched > 100 {
		t.Errorf("a claim of 10 rows over 10 keys fetched %d blocks of messages_key_idx (%d pages): its older-row checks walk the dead entries below the id floor", fetched, pages)
	}
}

// TestHeadsRepair_LooksAtTheFirstWaitingRowOfEachKey: the repair looks for
// an older row of one waiting row per key, the first, and makes it a
// candidate when none is left; it looked for one of every waiting row, and
// under a pinned horizon each of those lookups walked its key's dead
// entries (a 100-key backlog: one repair ran for minutes).
func TestHeadsRepair_LooksAtTheFirstWaitingRowOfEachKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	const keys, perKey = 20, 200
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key)
	            SELECT 'events.a', 'x', 'k' || (i % `+strconv.Itoa(keys)+`) FROM generate_series(1, `+strconv.Itoa(keys*perKey)+`) AS i`)
	// Every row waits behind its key's head, as the claims leave them;
	// then k3's head is deleted by hand, so its next row waits behind
	// nothing.
	db.Exec(t, `UPDATE %s.messages SET waiting = true WHERE id NOT IN (SELECT min(id) FROM %s.messages GROUP BY key)`)
	db.Exec(t, `DELETE FROM %s.messages WHERE id = (SELECT min(id) FROM %s.messages WHERE key = 'k3')`)
	db.Exec(t, `ANALYZE %s.messages`)
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModeOrdered, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	m := r.mode.(*ordered)

	tx := planTx(t, db)
	plan := explain(t, tx, m.repairHeads, r.engine.idFloorArgs(pgx.StrictNamedArgs{"cap": headsRepairCap}))
	if err := tx.Rollback(ctx); err != nil { // the explained update locked the row it repaired
		t.Fatal(err)
	}
	var lookups float64
	eachPlanNode(plan, func(n map[string]any) {
		if n["Index Name"] == "messages_key_idx" {
			lookups += n["Actual Loops"].(float64)
		}
	})
	if lookups == 0 || lookups > keys {
		t.Errorf("the repair looked for older rows %v times, want one lookup per key (%d) at most", lookups, keys)
	}
	if uses := indexScans(plan, "", indexNamed("messages_waiting_idx")); len(uses) == 0 {
		t.Errorf("the repair does not step through messages_waiting_idx")
	}

	var want int64
	if err := db.Pool.QueryRow(ctx, "SELECT min(id) FROM "+db.Table("messages")+" WHERE key = 'k3'").Scan(&want); err != nil {
		t.Fatal(err)
	}
	m.repair(ctx)
	rows, err := db.Pool.Query(ctx, "SELECT id FROM "+db.Table("messages")+" WHERE NOT waiting AND key = 'k3'")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != want {
		t.Errorf("k3's candidates after the repair: %v, want its oldest row %d alone", got, want)
	}
	if n := db.CountWhere(t, "messages_all", "NOT waiting"); n != keys {
		t.Errorf("%d candidates after the repair, want one per key (%d)", n, keys)
	}
}

// TestKeyLookups_RepairStepsThroughTheWaitingIndex: with the statistics of
// a nearly empty table and a pinned horizon, the repair still steps from
// key to key through messages_waiting_idx and reads no whole table: a
// sequential scan and a sort for each key's step would read every version
// the pin keeps, once per key.
func TestKeyLookups_RepairStepsThroughTheWaitingIndex(t *testing.T) {
	t.Parallel()
	db, r := staleStatistics(t, outbox.ModeOrdered)
	db.Exec(t, `UPDATE %s.messages SET waiting = true WHERE id NOT IN (SELECT min(id) FROM %s.messages GROUP BY key)`)
	tx := planTx(t, db)
	plan := explain(t, tx, r.mode.(*ordered).repairHeads, r.engine.idFloorArgs(pgx.StrictNamedArgs{"cap": headsRepairCap}))
	if uses := indexScans(plan, "", indexNamed("messages_waiting_idx")); len(uses) == 0 {
		t.Errorf("the repair does not step through messages_waiting_idx")
	}
	eachPlanNode(plan, func(n map[string]any) {
		if n["Node Type"] == "Seq Scan" && n["Relation Name"] == "messages" {
			t.Errorf("the repair reads the whole table: %v (%v rows, %v loops)", n["Node Type"], n["Actual Rows"], n["Actual Loops"])
		}
	})
}
