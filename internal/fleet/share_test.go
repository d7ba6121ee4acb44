package fleet

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// acquire runs the tracer's side of a successful Acquire for the outbox
// ctx names and returns the connection it got.
func acquire(sh *shares, ctx context.Context) *pgx.Conn {
	conn := &pgx.Conn{}
	ctx = sh.TraceAcquireStart(ctx, nil, pgxpool.TraceAcquireStartData{})
	sh.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{Conn: conn})
	return conn
}

// acquiring starts acquire in the background; the channel receives the
// connection once the outbox's turn came.
func acquiring(sh *shares, ctx context.Context) <-chan *pgx.Conn {
	got := make(chan *pgx.Conn, 1)
	go func() { got <- acquire(sh, ctx) }()
	return got
}

func release(sh *shares, conn *pgx.Conn) {
	sh.TraceRelease(nil, pgxpool.TraceReleaseData{Conn: conn})
}

// held is the number of connections the outbox ctx names holds.
func held(sh *shares, ctx context.Context) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return ctx.Value(shareKey{}).(*share).held
}

// mustWait reports whether the outbox ctx names would wait for its next
// connection.
func mustWait(sh *shares, ctx context.Context) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return ctx.Value(shareKey{}).(*share).held >= sh.most()
}

// arrives fails t unless got receives a connection.
func arrives(t *testing.T, got <-chan *pgx.Conn, what string) {
	t.Helper()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// An outbox's share is the pool divided by the outboxes that share it, at
// least shareFloor and at most what a relay serving it alone would have.
func TestShares_FairShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ outboxes, want int }{
		{1, shareMost}, {2, shareMost}, {3, 6}, {4, 4}, {6, 3}, {7, 2}, {9, 2}, {10, 2}, {100, 2},
	} {
		sh := newShares(sharedPoolSize)
		for range tc.outboxes {
			sh.join(context.Background())
		}
		if got := sh.most(); got != tc.want {
			t.Errorf("%d outboxes on a pool of %d: a share of %d, want %d", tc.outboxes, sharedPoolSize, got, tc.want)
		}
	}
}

// Outboxes whose connections stay held (statements waiting on a lock)
// hold their share each and no more: seven of ten, as in the finding,
// leave four connections of the pool to the others, and an outbox at its
// share takes the next one once it released one.
func TestShares_WaitingOutboxesLeaveTheRestToTheOthers(t *testing.T) {
	t.Parallel()
	sh := newShares(sharedPoolSize)
	var outboxes []context.Context
	for range 10 {
		ctx, _ := sh.join(context.Background())
		outboxes = append(outboxes, ctx)
	}
	stuck := 0
	for _, ctx := range outboxes[:7] {
		for !mustWait(sh, ctx) {
			acquire(sh, ctx)
			stuck++
		}
	}
	if free := sharedPoolSize - stuck; free != 4 {
		t.Fatalf("seven waiting outboxes leave %d connections of %d, want 4", free, sharedPoolSize)
	}
	other := outboxes[9]
	first := acquire(sh, other)
	acquire(sh, other)
	if !mustWait(sh, other) {
		t.Fatalf("an outbox holding %d may take another", held(sh, other))
	}
	next := acquiring(sh, other)
	release(sh, first)
	arrives(t, next, "the outbox's released connection did not let it take the next")
}

// When outboxes leave, the share of those that stay grows, and one waiting
// for its next connection takes it.
func TestShares_LeavingOutboxesGrowTheOthersShare(t *testing.T) {
	t.Parallel()
	sh := newShares(sharedPoolSize)
	a, _ := sh.join(context.Background())
	var leaves []func()
	for range 9 {
		_, leave := sh.join(context.Background())
		leaves = append(leaves, leave)
	}
	for !mustWait(sh, a) {
		acquire(sh, a)
	}
	next := acquiring(sh, a)
	for _, leave := range leaves {
		leave()
	}
	arrives(t, next, "the outbox left alone did not take its next connection")
	if got := held(sh, a); got != shareFloor+1 {
		t.Errorf("the outbox holds %d, want %d", got, shareFloor+1)
	}
}

// An Acquire whose context ends while it waits fails without counting a
// connection; one that fails after its turn came gives the place back; an
// Acquire for no outbox is not counted.
func TestShares_FailedOrUncountedAcquiresHoldNothing(t *testing.T) {
	t.Parallel()
	sh := newShares(sharedPoolSize)
	a, _ := sh.join(context.Background())
	for range shareMost {
		acquire(sh, a)
	}
	ctx, cancel := context.WithCancel(a)
	cancel()
	ctx = sh.TraceAcquireStart(ctx, nil, pgxpool.TraceAcquireStartData{})
	sh.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{Err: context.Canceled})
	b, _ := sh.join(context.Background())
	ctx = sh.TraceAcquireStart(b, nil, pgxpool.TraceAcquireStartData{})
	sh.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{Err: errors.New("connect: refused")})
	release(sh, acquire(sh, context.Background()))
	if got, gotB := held(sh, a), held(sh, b); got != shareMost || gotB != 0 || len(sh.holder) != shareMost {
		t.Errorf("held %d and %d (%d connections named), want %d and 0", got, gotB, len(sh.holder), shareMost)
	}
}

// A statement cut off by its context while it waits on a lock goes on
// waiting on the server until pgconn's cancel reaches it, after the pool
// has released its connection: its outbox's place is given back only once
// the server let it go, so that the outbox's next statement never waits
// beside it past the outbox's share. Real PostgreSQL, a table locked by
// another session, a share of two with one place held.
func TestShares_AStatementCutOffWhileWaitingHoldsItsPlaceUntilTheServerEndsIt(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	locked := db.Table("locked")
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE "+locked+" (id int)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Conn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+locked+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	sh := newShares(shareFloor * 10) // ten outboxes: a share of shareFloor
	pc, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	app := db.Name + "_share"
	pc.MaxConns = 5
	pc.ConnConfig.Tracer = sh
	pc.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	outbox, _ := sh.join(ctx)
	for range 9 {
		sh.join(ctx)
	}
	idle, err := pool.Acquire(outbox)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Release()

	for i := range 5 {
		// Idle connections in the pool, as a relay's has: the next
		// Acquire takes one at once rather than connecting.
		var warm []*pgxpool.Conn
		for range 3 {
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			warm = append(warm, c)
		}
		for _, c := range warm {
			c.Release()
		}
		cut, cancel := context.WithTimeout(outbox, 100*time.Millisecond)
		_, err := pool.Exec(cut, "SELECT count(*) FROM "+locked)
		cancel()
		if err == nil {
			t.Fatal("a statement on the locked table returned before the lock was released")
		}
		next, err := pool.Acquire(outbox)
		if err != nil {
			t.Fatal(err)
		}
		var waiting int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		next.Release()
		if waiting != 0 {
			t.Fatalf("statement %d: the outbox took its next connection while the server still ran the statement cut off before it (%d backends waiting on the lock)", i, waiting)
		}
	}
}
