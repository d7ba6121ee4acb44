package floor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// claimPlan is the relay's claim plan (queryClaimPlan), as it renders it.
const claimPlan = `
SELECT set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('plan_cache_mode', 'force_custom_plan', true),
       set_config('jit', 'off', true)`

// TestRun_FloorsPassDeliveredRowsAndARescanFindsOneBelow runs a Refresher
// against PostgreSQL: the floors stay at or below the rows pending, pass
// the rows once they are deleted (delivered), and a row written below them
// by a session that skips the outbox's triggers (a restore) is found by
// the rescan, which lowers the floors to it.
func TestRun_FloorsPassDeliveredRowsAndARescanFindsOneBelow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	var lags atomic.Int64
	r := New(Config{
		DB:         db.Pool,
		Statements: Render(pgx.Identifier{db.Name}.Sanitize(), sampleOldest),
		ClaimPlan:  claimPlan,
		Lease:      30 * time.Second,
		Hooks:      Hooks{Lag: func(time.Duration) { lags.Add(1) }},
	})
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'events.a', 'x' FROM generate_series(1, 100)`)
	var oldest, newest time.Time
	var first, last int64
	if err := db.Pool.QueryRow(ctx, "SELECT min(available_at), max(available_at), min(id), max(id) FROM "+db.Table("messages")).
		Scan(&oldest, &newest, &first, &last); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		r.Run(runCtx)
		close(done)
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	}()

	// While the rows are pending, the floors never pass them.
	refreshedAt := func() time.Time { return r.Status().Refreshed }
	since := time.Now()
	waitfor.Condition(t, 20*time.Second, "three refreshes", func() bool {
		r.Found()
		st := r.Status()
		if st.Known && (st.At.After(oldest) || st.ID > first) {
			t.Fatalf("the floors %v (id %d) passed the oldest pending row %v (id %d)", st.At, st.ID, oldest, first)
		}
		return refreshedAt().After(since.Add(300 * time.Millisecond))
	})

	// Delivered, they are passed; hold rescans off meanwhile, and wait for
	// no transaction of any age (other tests') to be in progress.
	db.Exec(t, `DELETE FROM %s.messages`)
	waitfor.Condition(t, 60*time.Second, "the floors past the delivered rows", func() bool {
		r.Found()
		return r.RescannedIf(time.Now(), func(st Status) bool {
			return st.Known && st.At.After(newest) && st.ID > last && st.AnyAge == 0 && !st.Rescanning && st.RescanAt == nil
		})
	})
	if lags.Load() == 0 {
		t.Error("no lag reported")
	}

	// A row restored an hour in the past, with an id below the id floor.
	var restoredAt time.Time
	db.ExecAsRelay(t, `INSERT INTO %s.messages (id, topic, payload, available_at, created_at)
	    VALUES (0, 'events.a', 'restored', now() - interval '1 hour', now() - interval '1 hour')`)
	if err := db.Pool.QueryRow(ctx, "SELECT available_at FROM "+db.Table("messages")+" WHERE id = 0").Scan(&restoredAt); err != nil {
		t.Fatal(err)
	}
	// The refreshes walk from the floors and do not see it (unless another
	// test's transaction sent the floors back meanwhile: then the row was
	// found without the rescan, and the rescan proves less).
	since = time.Now()
	waitfor.Condition(t, 20*time.Second, "three refreshes after the restore", func() bool {
		r.Found()
		return refreshedAt().After(since.Add(300 * time.Millisecond))
	})
	if st := r.Status(); !st.At.After(restoredAt) {
		t.Logf("the floors went back to the restored row before the rescan (%v, id %d): another transaction's end", st.At, st.ID)
	}
	r.RescanNow()
	waitfor.Condition(t, 20*time.Second, "the floors at the restored row", func() bool {
		r.Found()
		st := r.Status()
		return !st.At.After(restoredAt) && st.ID <= 0
	})
}
