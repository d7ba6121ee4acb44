package history

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// keeperOf returns a keeper of db's archive and delivered keys, kept for
// keep in partitions of width, on the clock *now.
func keeperOf(db *dbtest.Schema, keep, width time.Duration, now *time.Time, hooks Hooks) *Keeper {
	return New(Config{
		DB:         db.Pool,
		Statements: Render(pgx.Identifier{db.Name}.Sanitize()),
		Tables:     []Table{{Name: "archive", Keep: keep, Width: width}, {Name: "delivered_keys", Keep: keep, Width: width}},
		Chunk:      1000,
		Now:        func() time.Time { return *now },
		Hooks:      hooks,
	})
}

// partitionsOf lists table's partitions, oldest first.
func partitionsOf(t *testing.T, k *Keeper, table string) []Partition {
	t.Helper()
	parts, err := k.partitions(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// TestMaintain_AddsPartitionsAheadAndDropsThosePastRetention keeps an
// hour's history in 15-minute partitions while the clock moves on three
// hours: every round leaves a partition covering now and the next width,
// rows archived as the clock moves land in them, and a partition is
// dropped, with its rows counted, once its upper bound is an hour old,
// the first partition (the table before migration 23) included.
func TestMaintain_AddsPartitionsAheadAndDropsThosePastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	now := time.Now().Truncate(time.Microsecond) // PostgreSQL's precision
	var mu sync.Mutex
	dropped := map[string]int64{}
	counts := map[string]int{}
	k := keeperOf(db, time.Hour, 15*time.Minute, &now, Hooks{
		Dropped:    func(table string, _ int, rows int64) { mu.Lock(); dropped[table] += rows; mu.Unlock() },
		Partitions: func(table string, n int) { mu.Lock(); counts[table] = n; mu.Unlock() },
	})
	// A row archived before the first round lands in the first partition.
	db.Exec(t, `INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts, delivered_at)
	            VALUES (0, 't', 'x', 'k0', now(), 1, now() - interval '1 minute')`)
	start := now
	for i := 1; i <= 36; i++ { // three hours, five minutes at a time
		k.Maintain(ctx)
		for _, table := range Tables {
			parts := partitionsOf(t, k, table)
			last := parts[len(parts)-1].Upper.Time
			if last.Before(now.Add(15 * time.Minute)) {
				t.Fatalf("at +%s %s's partitions end at %s, before now + a width", now.Sub(start), table, last)
			}
			for _, p := range parts[1:] {
				if w := p.Upper.Time.Sub(p.Lower.Time); w > 30*time.Minute {
					t.Fatalf("at +%s %s keeps %s, %s wide: the empty hour-wide partition migration 23 added was not replaced by 15-minute ones", now.Sub(start), table, p.Name, w)
				}
			}
			if first := parts[0].Upper.Time; !first.After(now.Add(-time.Hour - 15*time.Minute)) {
				t.Fatalf("at +%s %s keeps a partition ending at %s, more than a width past retention", now.Sub(start), table, first)
			}
		}
		db.Exec(t, `INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts, delivered_at)
		            VALUES ($1::bigint, 't', 'x', 'k' || $1::bigint, $2, 1, $2)`, i, now)
		db.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key, delivered_at) VALUES ('k' || $1::bigint, $2)`, i, now)
		now = now.Add(5 * time.Minute)
	}
	// Rows of the last hour stay, at most a width more; the rest went with
	// their partitions, the first partition's row too.
	kept := db.Count(t, "archive")
	if kept < 12 || kept > 15 {
		t.Errorf("archive keeps %d rows of 37, want the last hour's 12 and at most a width's 3 more", kept)
	}
	if got := db.CountWhere(t, "archive", "id = 0"); got != 0 {
		t.Errorf("the row archived before the first round is still there, 3 hours past its retention")
	}
	mu.Lock()
	defer mu.Unlock()
	if dropped["archive"] != int64(37-kept) {
		t.Errorf("dropped partitions held %d archived rows by the hook, want %d", dropped["archive"], 37-kept)
	}
	if keys := db.Count(t, "delivered_keys"); dropped["delivered_keys"] != int64(36-keys) {
		t.Errorf("dropped partitions held %d delivered keys by the hook, want %d", dropped["delivered_keys"], 36-keys)
	}
	if n := len(partitionsOf(t, k, "archive")); counts["archive"] != n || n > 7 {
		t.Errorf("archive has %d partitions, the hook learned %d; want at most 7 for an hour in 15 minutes and one ahead", n, counts["archive"])
	}
}

// TestMaintain_DeletesTheFirstPartitionsExpiredRowsInChunks: rows archived
// before migration 23 and past retention are deleted a chunk at a time
// while the first partition as a whole is not yet past retention; fresh
// rows and rows kept forever stay.
func TestMaintain_DeletesTheFirstPartitionsExpiredRowsInChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts, delivered_at)
	            SELECT i, 't', 'x', 'k' || i, now(), 1, now() - CASE WHEN i <= 2500 THEN interval '8 days' ELSE interval '1 hour' END
	              FROM generate_series(1, 2510) AS i`)
	db.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key, delivered_at)
	            SELECT 'k' || i, now() - CASE WHEN i <= 2500 THEN interval '8 days' ELSE interval '1 hour' END
	              FROM generate_series(1, 2510) AS i`)
	now := time.Now().Truncate(time.Microsecond) // PostgreSQL's precision
	var mu sync.Mutex
	deleted := map[string]int64{}
	k := keeperOf(db, 7*24*time.Hour, 0, &now, Hooks{
		Deleted: func(table string, rows int64) { mu.Lock(); deleted[table] += rows; mu.Unlock() },
	})
	k.Maintain(ctx)
	for _, table := range Tables {
		if got := db.Count(t, table); got != 10 {
			t.Errorf("%s holds %d rows after a round, want the 10 fresh ones", table, got)
		}
		if deleted[table] != 2500 {
			t.Errorf("the hook learned %d deleted rows of %s, want 2500", deleted[table], table)
		}
	}

	db.Exec(t, `UPDATE %s.archive SET delivered_at = now() - interval '1000 days'`)
	forever := keeperOf(db, 0, 0, &now, Hooks{})
	forever.Maintain(ctx)
	if got := db.Count(t, "archive"); got != 10 {
		t.Errorf("archive holds %d rows kept forever, want 10", got)
	}
}

// TestMaintain_GivesUpWhileTheTableIsInUseAndTriesAgain: while a session
// reads the archive, adding its partitions would wait behind it; the round
// gives up on the table after LockWait, keeps the delivered keys, and the
// next round, once the reader is gone, adds the archive's. Three busy
// rounds in a row are warned about, and the recovery logged. Two relays'
// rounds at once never fail: one keeps the tables, the other leaves them
// to it.
func TestMaintain_GivesUpWhileTheTableIsInUseAndTriesAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	now := time.Now().Add(3 * time.Hour).Truncate(time.Microsecond) // past the partitions migration 23 added
	k := keeperOf(db, time.Hour, 0, &now, Hooks{})
	k.cfg.LockWait = 50 * time.Millisecond
	before := partitionsOf(t, k, "archive")

	reader, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM "+db.Table("archive")); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	k.cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	began := time.Now()
	k.Maintain(ctx)
	if waited := time.Since(began); waited > 5*time.Second {
		t.Errorf("a round waited %s behind a reader", waited)
	}
	if strings.Contains(log.String(), "level=WARN") {
		t.Errorf("one busy round warned:\n%s", log.String())
	}
	k.Maintain(ctx)
	k.Maintain(ctx)
	if !strings.Contains(log.String(), `level=WARN msg="cannot add or drop the history's partitions`) || !strings.Contains(log.String(), "table=archive") {
		t.Errorf("three busy rounds in a row did not warn about the archive:\n%s", log.String())
	}
	if after := partitionsOf(t, k, "archive"); !slices.Equal(after, before) {
		t.Errorf("the archive's partitions changed in a round while a session read it:\n%v\nwant\n%v", after, before)
	}
	covered := func(table string) bool {
		parts := partitionsOf(t, k, table)
		return !parts[len(parts)-1].Upper.Time.Before(now.Add(15 * time.Minute))
	}
	if !covered("delivered_keys") {
		t.Errorf("the delivered keys' partitions do not cover the next width: the busy archive stopped them")
	}
	if err := reader.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { keeperOf(db, time.Hour, 0, &now, Hooks{}).Maintain(ctx) })
	}
	wg.Wait()
	k.Maintain(ctx)
	if !strings.Contains(log.String(), "the history's partitions are kept again") {
		t.Errorf("the recovery was not logged:\n%s", log.String())
	}
	if !covered("archive") {
		t.Errorf("the archive's partitions do not cover the next width after the reader left")
	}
	if k.failing["archive"] || k.failing["delivered_keys"] {
		t.Errorf("a round failed: %v", k.failing)
	}
}
