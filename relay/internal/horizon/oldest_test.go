package horizon_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
)

// ReadOldest names the session that holds a snapshot as the oldest
// holder, first, with what an operator needs to end it: its pid,
// application, user, state and age. The test has a database of its own,
// so that other tests' sessions do not come first.
func TestReadOldest_NamesTheSessionThatHoldsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDatabase(t)
	db := pool(t, url)

	before, err := horizon.ReadOldest(ctx, db, 5)
	if err != nil {
		t.Fatal(err)
	}
	if !before.SeesAllSessions || before.Holders == nil {
		t.Errorf("before any snapshot is held: %+v, want the superuser to see every session and a list", before)
	}

	holder := connect(t, url, "nightly-report")
	begun := holdSnapshot(t, holder, connect(t, url, "other"))
	time.Sleep(hold) // the age the test measures
	held := time.Since(begun)

	got, err := horizon.ReadOldest(ctx, db, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Holders) == 0 || got.Holders[0].PID == nil || *got.Holders[0].PID != int32(holder.PgConn().PID()) {
		t.Fatalf("holders %+v, want the session of pid %d first", got.Holders, holder.PgConn().PID())
	}
	h := got.Holders[0]
	if h.Kind != horizon.HolderSession || h.ApplicationName != "nightly-report" || h.State != "idle in transaction" ||
		h.User == "" || h.Name != "" || h.AgeSeconds == nil || *h.AgeSeconds < held.Seconds()-0.5 || h.AgeTransactions < 10 {
		t.Errorf("oldest holder %+v, want the session nightly-report, idle in transaction, held %s behind 10 transactions", h, held)
	}

	// In a batch of the caller's, in its transaction, with its own
	// statements around it.
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var o horizon.Oldest
	var before1, after1 int
	b := &pgx.Batch{}
	b.Queue("SELECT 1").QueryRow(func(row pgx.Row) error { return row.Scan(&before1) })
	horizon.QueueOldest(b, 1, &o)
	b.Queue("SELECT 1").QueryRow(func(row pgx.Row) error { return row.Scan(&after1) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if before1 != 1 || after1 != 1 || !o.SeesAllSessions || len(o.Holders) != 1 || *o.Holders[0].PID != *h.PID {
		t.Errorf("queued in a batch: %+v (the caller's statements read %d and %d), want the one oldest holder, pid %d", o, before1, after1, *h.PID)
	}
}

// A role without pg_read_all_stats sees that another role's session holds
// the horizon, and how many transactions behind, but not since when nor
// in what state: ReadOldest says so.
func TestReadOldest_WithoutReadAllStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDatabase(t)
	role := dbtest.NewRole(t, "reader")
	holder := connect(t, url, "nightly-report") // the superuser: another role
	holdSnapshot(t, holder, connect(t, url, "other"))

	got, err := horizon.ReadOldest(ctx, pool(t, role.WithUser(url)), 5)
	if err != nil {
		t.Fatal(err)
	}
	if got.SeesAllSessions || len(got.Holders) == 0 {
		t.Fatalf("without pg_read_all_stats: %+v, want SeesAllSessions false and the holder listed", got)
	}
	h := got.Holders[0]
	if h.PID == nil || *h.PID != int32(holder.PgConn().PID()) || h.AgeSeconds != nil || h.State != "" || h.AgeTransactions < 10 {
		t.Errorf("without pg_read_all_stats the oldest holder is %+v: want pid %d, no age in seconds, no state, 10 transactions behind", h, holder.PgConn().PID())
	}
}
