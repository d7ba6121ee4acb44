package admin_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/admin"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	// order-1: one due row, one in backoff, one delayed, one in flight,
	// one whose lease expired. order-2: one due row.
	db.ExecAsRelay(t, `
INSERT INTO %s.messages (topic, payload, key, idempotency_key, available_at, attempts, leased_by, leased_until) VALUES
    ('orders.created', 'x', 'order-1', 'due',      now(),                        0, NULL,      NULL),
    ('orders.created', 'x', 'order-1', 'backoff',  now() + interval '1 minute',  2, NULL,      NULL),
    ('orders.updated', 'x', 'order-1', 'delayed',  now() + interval '1 hour',    0, NULL,      NULL),
    ('orders.updated', 'x', 'order-1', 'inflight', now(),                        1, 'relay-1', now() + interval '1 hour'),
    ('orders.updated', 'x', 'order-1', 'expired',  now(),                        1, 'relay-1', now() - interval '1 second'),
    ('orders.created', 'x', 'order-2', 'other',    now(),                        0, NULL,      NULL)`)

	opts := admin.CancelOptions{Key: "order-1", DryRun: true}
	dry, err := ops(t, db).Cancel(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := admin.CancelResult{DryRun: true, Matched: 5, Cancelled: 4, InFlight: 1}
	if dry != want {
		t.Errorf("dry run: %+v, want %+v", dry, want)
	}
	if db.Count(t, "messages_all") != 6 || db.Count(t, "dead_letters") != 0 {
		t.Fatal("the dry run changed the tables")
	}

	opts.DryRun = false
	res, err := ops(t, db).Cancel(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	want.DryRun = false
	if res != want {
		t.Errorf("cancel: %+v, want %+v", res, want)
	}
	if got := column(t, db, "messages", "idempotency_key"); !slices.Equal(got, []string{"inflight", "other"}) {
		t.Errorf("hot table keeps %v, want the row in flight and the other key's", got)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+db.Table("dead_letters")+`
	   WHERE reason = 'cancelled' AND error = 'cancelled by operator' AND key = 'order-1'
	     AND attempts = CASE idempotency_key WHEN 'backoff' THEN 2 WHEN 'expired' THEN 1 ELSE 0 END`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d of 4 dead letters have reason cancelled, the operator's error and their attempts", n)
	}

	// A topic pattern; both filters must match.
	res, err = ops(t, db).Cancel(ctx, admin.CancelOptions{Topic: "orders.%", Key: "order-2"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 1 || res.Cancelled != 1 {
		t.Errorf("cancel by topic pattern and key: %+v", res)
	}

	// Retrying the cancelled dead letters undoes the cancel.
	retry, err := ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: admin.DeadFilter{Reason: outbox.ReasonCancelled}})
	if err != nil {
		t.Fatal(err)
	}
	if retry.Retried != 5 || db.Count(t, "dead_letters") != 0 {
		t.Errorf("retry of cancelled rows: %+v, %d dead letters left", retry, db.Count(t, "dead_letters"))
	}
}

// heldSink holds deliveries until release is closed, then reports them
// delivered. Once a delivery has started it says it is unavailable, so the
// relay claims nothing more. hasStarted reports whether one has.
func heldSink(release chan struct{}) (sink *sinktest.Func, hasStarted func() bool) {
	var started atomic.Bool
	sink = &sinktest.Func{
		DeliverFunc: func(_ context.Context, msgs []sinks.Message) []error {
			started.Store(true)
			<-release
			return make([]error, len(msgs))
		},
		AvailableFunc: func() error {
			if started.Load() {
				return errors.New("busy")
			}
			return nil
		},
	}
	return sink, started.Load
}

// A relay that stalls past its lease and then settles a row an operator
// cancelled meanwhile finds it gone: the row stays cancelled, and nothing is
// archived or recorded as delivered.
func TestCancel_LateSettleIsANoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	insertPending(t, db, "orders.created", "order-1", "k1")

	release := make(chan struct{})
	sink, hasStarted := heldSink(release)
	metrics := relay.NewMetrics()
	startRelay(t, db, relay.Config{
		ID:      "relay-1",
		Sinks:   map[string]sinks.Sink{"nats": sink},
		Lease:   2 * time.Second,
		Metrics: metrics,
	})
	// Let the sink go before the relay stops (cleanups run last first).
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	waitfor.Condition(t, 10*time.Second, "the relay to claim the row", hasStarted)
	res, err := ops(t, db).Cancel(ctx, admin.CancelOptions{Key: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cancelled != 0 || res.InFlight != 1 {
		t.Fatalf("cancel under a running lease: %+v, want the row left in flight", res)
	}
	// The lease runs out while the sink is still stuck. The row is also made
	// not due yet, so that the running relay cannot claim it again before
	// the cancel below.
	db.Exec(t, `UPDATE %s.messages SET leased_until = now() - interval '1 millisecond', available_at = now() + interval '1 hour'`)
	res, err = ops(t, db).Cancel(ctx, admin.CancelOptions{Key: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cancelled != 1 {
		t.Fatalf("cancel after the lease expired: %+v, want the row cancelled", res)
	}
	close(release)
	waitfor.Condition(t, 10*time.Second, "the relay's late settle", func() bool { return testutil.ToFloat64(metrics.LeaseLost) >= 1 })
	if db.Count(t, "dead_letters") != 1 || db.Count(t, "archive") != 0 || db.Count(t, "delivered_keys") != 0 || db.Count(t, "messages_all") != 0 {
		t.Errorf("after the late settle: %d dead letters, %d archived, %d delivered keys, %d pending; want 1, 0, 0, 0",
			db.Count(t, "dead_letters"), db.Count(t, "archive"), db.Count(t, "delivered_keys"), db.Count(t, "messages_all"))
	}
}

// TestCancel_WaitsForARotationsCarry cancels a key while the hot table's
// rotation is carrying its delayed row from a draining generation's table
// into another (migration 24), its transaction not committed yet: the
// cancel waits for the carry and finds the row where it went, instead of
// missing it in both tables and leaving it to be delivered.
func TestCancel_WaitsForARotationsCarry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, available_at) VALUES ('t', 'x', 'order-1', now() + interval '1 day')`)
	if n := db.Exec(t, `SELECT FROM %s.messages_rotate(interval '0', interval '1 second') WHERE generation IS NOT NULL`); n != 1 {
		t.Fatal("the current generation did not rotate")
	}
	// The spare is put back into messages_all in a call of its own.
	var carried int
	var attached bool
	if err := db.Pool.QueryRow(ctx, `SELECT carried, attached FROM `+db.Table("messages_carry")+`(10, interval '1 second', interval '0')`).
		Scan(&carried, &attached); err != nil || carried != 0 || !attached {
		t.Fatalf("the first carry: %d carried, attached %v, %v; want the spare attached", carried, attached, err)
	}
	carry, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer carry.Rollback(ctx)
	if err := carry.QueryRow(ctx, `SELECT carried FROM `+db.Table("messages_carry")+`(10, interval '1 second', interval '0')`).
		Scan(&carried); err != nil || carried != 1 {
		t.Fatalf("the carry: %d carried, %v; want the delayed row", carried, err)
	}

	done := make(chan admin.CancelResult, 1)
	go func() {
		res, err := ops(t, db).Cancel(ctx, admin.CancelOptions{Key: "order-1"})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case res := <-done:
		t.Fatalf("the cancel did not wait for the carry: %+v", res)
	case <-time.After(300 * time.Millisecond):
	}
	if err := carry.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Cancelled != 1 {
		t.Errorf("cancel: %+v, want the carried row cancelled", res)
	}
	if n := db.Count(t, "messages_all"); n != 0 {
		t.Errorf("%d rows left in the hot table, want the cancelled row gone", n)
	}
	if n := db.CountWhere(t, "dead_letters", "reason = 'cancelled'"); n != 1 {
		t.Errorf("%d cancelled dead letters, want 1", n)
	}
}
