package admin_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

func TestListDead_Filters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	a := insertDead(t, db, "orders.created", "order-1", "k1", "permanent", "nats: Maximum Payload exceeded")
	b := insertDead(t, db, "orders.cancelled", "order-2", "k2", "exhausted", "after 25 attempts: 50% of replicas down")
	c := insertDead(t, db, "orders_x", "order-1", "k3", "no_sink", `destination "kafka" is not a configured sink`)
	d := insertDead(t, db, "payments.done", "", "k4", "cancelled", "cancelled by operator")
	db.Exec(t, `UPDATE %s.dead_letters SET failed_at = now() - interval '2 days' WHERE id = $1`, a)

	since := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name   string
		filter admin.DeadFilter
		want   []int64
	}{
		{"everything", admin.DeadFilter{}, []int64{a, b, c, d}},
		{"exact topic", admin.DeadFilter{Topic: "orders.created"}, []int64{a}},
		{"topic pattern", admin.DeadFilter{Topic: "orders.%"}, []int64{a, b}},
		{"an exact topic's _ is no wildcard", admin.DeadFilter{Topic: "orders_created"}, nil},
		{"pattern _ is a wildcard", admin.DeadFilter{Topic: "orders_%"}, []int64{a, b, c}},
		{"key", admin.DeadFilter{Key: "order-1"}, []int64{a, c}},
		{"reason", admin.DeadFilter{Reason: "cancelled"}, []int64{d}},
		{"error ignores case", admin.DeadFilter{Error: "maximum payload"}, []int64{a}},
		{"error % is literal", admin.DeadFilter{Error: "50%"}, []int64{b}},
		{"error _ is literal", admin.DeadFilter{Error: "s_nk"}, nil},
		{"since", admin.DeadFilter{Since: since}, []int64{b, c, d}},
		{"ids", admin.DeadFilter{IDs: []int64{d, b}}, []int64{b, d}},
		{"combined", admin.DeadFilter{Key: "order-1", Since: since}, []int64{c}},
		{"limit", admin.DeadFilter{Limit: 2}, []int64{a, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := ops(t, db).ListDead(ctx, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, l := range list.Letters {
				got = append(got, l.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ids = %v, want %v", got, tc.want)
			}
		})
	}

	list, err := ops(t, db).ListDead(ctx, admin.DeadFilter{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if list.Matched != 4 || len(list.Letters) != 1 {
		t.Fatalf("limit 1: matched %d, %d rows; want 4 matched, 1 row", list.Matched, len(list.Letters))
	}
	l := list.Letters[0]
	want := admin.DeadLetter{ID: a, Topic: "orders.created", Key: "order-1", IdempotencyKey: "k1", Destination: "nats",
		Attempts: 3, Reason: "permanent", Error: "nats: Maximum Payload exceeded", FailedAt: l.FailedAt,
		CreatedAt: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), PayloadBytes: 2}
	l.CreatedAt = l.CreatedAt.UTC()
	if l != want {
		t.Errorf("dead letter = %+v\nwant %+v", l, want)
	}
}

func TestRetryDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	plain := insertDead(t, db, "orders.created", "order-1", "plain", "exhausted", "timeout")
	pending := insertDead(t, db, "orders.created", "order-2", "pending", "exhausted", "timeout")
	insertPending(t, db, "orders.created", "order-2", "pending")
	delivered := insertDead(t, db, "orders.created", "order-3", "delivered", "exhausted", "timeout")
	db.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key) VALUES ('delivered')`)
	twiceOld := insertDead(t, db, "orders.created", "order-4", "twice", "permanent", "first")
	twiceNew := insertDead(t, db, "orders.created", "order-4", "twice", "permanent", "second")
	other := insertDead(t, db, "payments.done", "", "other", "permanent", "boom")

	filter := admin.DeadFilter{Topic: "orders.%"}
	dry, err := ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: filter, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	want := admin.RetryDeadResult{DryRun: true, Matched: 5, Retried: 2, SkippedPending: 2, SkippedDelivered: 1, DeliveredIDs: []int64{delivered}}
	if !equalRetry(dry, want) {
		t.Errorf("dry run: %+v\nwant %+v", dry, want)
	}
	if db.Count(t, "dead_letters") != 6 || db.Count(t, "messages_all") != 1 {
		t.Fatal("the dry run changed the tables")
	}

	retriedFrom := time.Now().Add(-time.Second) // the database's clock may be a little behind
	res, err := ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: filter})
	if err != nil {
		t.Fatal(err)
	}
	want.DryRun = false
	if !equalRetry(res, want) {
		t.Errorf("retry: %+v\nwant %+v", res, want)
	}

	// Left in the dead letters: the pending key, the delivered key, the
	// older of the two with one key, and what the filter did not select.
	var left []int64
	for _, l := range mustList(t, db, admin.DeadFilter{}).Letters {
		left = append(left, l.ID)
	}
	if wantLeft := []int64{pending, delivered, twiceOld, other}; !slices.Equal(left, wantLeft) {
		t.Errorf("dead letters left: %v, want %v (plain %d and newer twice %d retried)", left, wantLeft, plain, twiceNew)
	}

	// Back in the hot table as new, fresh rows with the original content,
	// created when they were put back (created_at is the database's).
	rows, err := db.Pool.Query(ctx, `
SELECT id, idempotency_key, key, topic, payload, headers->>'trace-id', destination, attempts,
       leased_by IS NULL AND leased_until IS NULL AND last_error IS NULL, available_at <= now(), created_at
  FROM `+db.Table("messages")+` WHERE idempotency_key <> 'pending' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var (
			id                               int64
			idemKey, key, topic, trace, dest string
			payload                          []byte
			attempts                         int
			noLease, due                     bool
			createdAt                        time.Time
		)
		if err := rows.Scan(&id, &idemKey, &key, &topic, &payload, &trace, &dest, &attempts, &noLease, &due, &createdAt); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, idemKey)
		if id == plain || id == twiceNew {
			t.Errorf("retried row %s kept its dead letter id %d; want a new id", idemKey, id)
		}
		if string(payload) != "\x00\xff" || trace != "t1" || dest != "nats" || attempts != 0 || !noLease || !due ||
			createdAt.Before(retriedFrom) {
			t.Errorf("retried row %s: payload %q, trace %q, destination %q, attempts %d, no lease %v, due %v, created %v",
				idemKey, payload, trace, dest, attempts, noLease, due, createdAt)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"plain", "twice"}) {
		t.Errorf("retried keys in insert order: %v, want plain, twice", keys)
	}

	// Nothing matches twice: a second retry finds only rows to skip.
	res, err = ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: filter})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 3 || res.Retried != 0 || res.SkippedPending != 2 || res.SkippedDelivered != 1 {
		t.Errorf("second retry: %+v, want 3 matched, 2 pending, 1 delivered", res)
	}
}

func equalRetry(a, b admin.RetryDeadResult) bool {
	return a.DryRun == b.DryRun && a.Matched == b.Matched && a.Retried == b.Retried &&
		a.SkippedPending == b.SkippedPending && a.SkippedDelivered == b.SkippedDelivered &&
		slices.Equal(a.DeliveredIDs, b.DeliveredIDs)
}

func mustList(t *testing.T, db *dbtest.Schema, f admin.DeadFilter) *admin.DeadList {
	t.Helper()
	list, err := ops(t, db).ListDead(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestRetryDead_Limit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	first := insertDead(t, db, "a", "", "k1", "permanent", "boom")
	insertDead(t, db, "a", "", "k2", "permanent", "boom")
	insertDead(t, db, "a", "", "k3", "permanent", "boom")
	res, err := ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: admin.DeadFilter{All: true, Limit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 1 || res.Retried != 1 {
		t.Errorf("retry with limit 1: %+v", res)
	}
	if got := column(t, db, "messages", "idempotency_key"); !slices.Equal(got, []string{"k1"}) {
		t.Errorf("retried %v, want the oldest (id %d, k1)", got, first)
	}
}

func TestPurgeDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	insertDead(t, db, "a", "", "k1", "permanent", "boom")
	insertDead(t, db, "a", "", "k2", "exhausted", "timeout")
	insertDead(t, db, "a", "", "k3", "exhausted", "Timeout")

	opts := admin.PurgeDeadOptions{DeadFilter: admin.DeadFilter{Error: "timeout"}, DryRun: true}
	res, err := ops(t, db).PurgeDead(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.AsOf.IsZero() {
		t.Errorf("dry run: %+v, without the database's time", res)
	}
	if res.Purged != 2 || !res.DryRun || db.Count(t, "dead_letters") != 3 {
		t.Errorf("dry run: %+v, %d dead letters left; want 2 to purge and 3 left", res, db.Count(t, "dead_letters"))
	}
	opts.DryRun = false
	res, err = ops(t, db).PurgeDead(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Purged != 2 {
		t.Errorf("purged %d, want 2", res.Purged)
	}
	if got := column(t, db, "dead_letters", "idempotency_key"); !slices.Equal(got, []string{"k1"}) {
		t.Errorf("dead letters left: %v, want k1", got)
	}
}

func TestRetryDead_UndoesACancelAndReroutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	a := ops(t, db)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key, available_at) VALUES
	            ('orders.later', 'x', 'k1', 'later', now() + interval '1 hour'),
	            ('orders.now', 'x', 'k2', 'now', now())`)
	if _, err := a.Cancel(ctx, admin.CancelOptions{Topic: "orders.%"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: admin.DeadFilter{Reason: outbox.ReasonCancelled, Key: "k1"}}); err != nil {
		t.Fatal(err)
	}
	var delayed bool
	if err := db.Pool.QueryRow(ctx, "SELECT available_at > now() + interval '50 minutes' FROM "+db.Table("messages")+" WHERE idempotency_key = 'later'").Scan(&delayed); err != nil || !delayed {
		t.Errorf("a row cancelled while delayed by an hour came back delayed=%v (%v): want it still delayed", delayed, err)
	}

	// Re-route the other one: a typo in its destination and topic.
	db.Exec(t, `UPDATE %s.dead_letters SET destination = 'kafak', reason = 'no_sink' WHERE idempotency_key = 'now'`)
	if _, err := a.ListDead(ctx, admin.DeadFilter{Reason: "nosink"}); !errors.Is(err, admin.ErrUnknownReason) ||
		!strings.Contains(err.Error(), "no_sink") {
		t.Errorf("an unknown reason: %v, want ErrUnknownReason listing the valid ones", err)
	}
	list, err := a.ListDead(ctx, admin.DeadFilter{Destination: "kafak"})
	if err != nil || list.Matched != 1 {
		t.Fatalf("dead letters for destination kafak: %+v, %v", list, err)
	}
	dry, err := a.RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: admin.DeadFilter{Destination: "kafak"}, SetDestination: "kafka", SetTopic: "orders.paid", DryRun: true})
	if err != nil || dry.Retried != 1 || db.Count(t, "dead_letters") != 1 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if _, err := a.RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: admin.DeadFilter{Destination: "kafak"}, SetDestination: "kafka", SetTopic: "orders.paid"}); err != nil {
		t.Fatal(err)
	}
	var topic, destination string
	if err := db.Pool.QueryRow(ctx, "SELECT topic, destination FROM "+db.Table("messages")+" WHERE idempotency_key = 'now'").Scan(&topic, &destination); err != nil {
		t.Fatal(err)
	}
	if topic != "orders.paid" || destination != "kafka" {
		t.Errorf("re-routed to %s on %s, want orders.paid on kafka", topic, destination)
	}
}

// Dead letters are taken oldest failure first, whatever their ids: a row
// retried and dead again failed last, though its id may be the lowest.
func TestListDead_OldestFailureFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	a := insertDead(t, db, "a", "", "k1", "permanent", "boom")
	b := insertDead(t, db, "a", "", "k2", "permanent", "boom")
	c := insertDead(t, db, "a", "", "k3", "permanent", "boom")
	db.Exec(t, `UPDATE %s.dead_letters SET failed_at = now() - interval '2 hours' WHERE id = $1`, b)
	db.Exec(t, `UPDATE %s.dead_letters SET failed_at = now() - interval '1 hour' WHERE id = $1`, c)
	db.Exec(t, `UPDATE %s.dead_letters SET failed_at = now() WHERE id = $1`, a)
	list, err := ops(t, db).ListDead(ctx, admin.DeadFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, l := range list.Letters {
		got = append(got, l.ID)
	}
	if want := []int64{b, c, a}; !slices.Equal(got, want) {
		t.Errorf("ids = %v, want %v (by failed_at)", got, want)
	}
	res, err := ops(t, db).PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: admin.DeadFilter{All: true, Limit: 1}})
	if err != nil || res.Purged != 1 {
		t.Fatalf("purge with limit 1: %+v, %v", res, err)
	}
	if got := column(t, db, "dead_letters", "idempotency_key"); !slices.Equal(got, []string{"k1", "k3"}) {
		t.Errorf("dead letters left after purging the oldest failure: %v, want k1 and k3", got)
	}
}

// A topic pattern of wildcards alone matches every topic: it is no filter,
// so moving or deleting rows with it needs All, as with no filter at all.
func TestTopicPatternMatchingEverythingIsNoFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	insertDead(t, db, "orders.created", "", "k1", "permanent", "boom")
	insertArchived(t, db, "orders.created", "", "k2", time.Minute, false)
	insertPending(t, db, "orders.created", "", "k3")
	a := ops(t, db)
	for _, topic := range []string{"%", "%%", "_%", "%_%"} {
		if !admin.TopicMatchesAll(topic) {
			t.Errorf("TopicMatchesAll(%q) = false", topic)
		}
		if _, err := a.PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: admin.DeadFilter{Topic: topic}}); !errors.Is(err, admin.ErrNoFilter) {
			t.Errorf("purge --topic %q: %v, want ErrNoFilter", topic, err)
		}
		if _, err := a.RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: admin.DeadFilter{Topic: topic}}); !errors.Is(err, admin.ErrNoFilter) {
			t.Errorf("retry --topic %q: %v, want ErrNoFilter", topic, err)
		}
		if _, err := a.Replay(ctx, admin.ReplayOptions{Topic: topic}); !errors.Is(err, admin.ErrNoFilter) {
			t.Errorf("replay --topic %q: %v, want ErrNoFilter", topic, err)
		}
		if _, err := a.Cancel(ctx, admin.CancelOptions{Topic: topic}); !errors.Is(err, admin.ErrNoFilter) {
			t.Errorf("cancel --topic %q: %v, want ErrNoFilter", topic, err)
		}
	}
	for _, topic := range []string{"orders.%", `\%`, "o%", "orders.created", "_"} {
		if admin.TopicMatchesAll(topic) {
			t.Errorf("TopicMatchesAll(%q) = true", topic)
		}
	}
	if db.Count(t, "dead_letters") != 1 || db.Count(t, "messages_all") != 1 {
		t.Fatal("a refused operation changed rows")
	}
	res, err := a.PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: admin.DeadFilter{Topic: "%", All: true}})
	if err != nil || res.Purged != 1 {
		t.Errorf("purge --topic %% --all: %+v, %v; want 1 purged", res, err)
	}
}

// A dead letter the hot table refuses back (headers over the insert
// guard's budget: it was dead-lettered for them, or written before the
// budget) stays, named by id with the refusal; the others are retried, in
// the order a retry of all of them inserts them.
func TestRetryDead_TheHotTableRefusingOneRetriesTheOthersAndNamesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	first := insertDead(t, db, "orders.created", "order-1", "k1", "permanent", "boom")
	big := insertDead(t, db, "orders.created", "order-1", "k2", "permanent", "headers over the budget")
	db.Exec(t, `UPDATE %s.dead_letters SET headers = jsonb_build_object('x-big', repeat('x', 20000)) WHERE id = $1`, big)
	pending := insertDead(t, db, "orders.created", "order-3", "k3", "permanent", "boom")
	insertPending(t, db, "orders.created", "order-3", "k3")
	last := insertDead(t, db, "orders.created", "order-1", "k4", "permanent", "boom")

	res, err := ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: admin.DeadFilter{All: true}})
	if err != nil {
		t.Fatalf("retry: %v, want the others retried and %d named", err, big)
	}
	want := admin.RetryDeadResult{Matched: 4, Retried: 2, SkippedPending: 1}
	if !equalRetry(res, want) || len(res.Refused) != 1 || res.Refused[0].ID != big ||
		!strings.Contains(res.Refused[0].Reason, "headers must be at most 16384 bytes") {
		t.Errorf("retry: %+v\nwant %+v and dead letter %d refused for its headers", res, want, big)
	}
	var left []int64
	for _, l := range mustList(t, db, admin.DeadFilter{}).Letters {
		left = append(left, l.ID)
	}
	if !slices.Equal(left, []int64{big, pending}) {
		t.Errorf("dead letters left: %v, want %d (refused) and %d (pending); %d and %d retried", left, big, pending, first, last)
	}
	rows, err := db.Pool.Query(ctx, `SELECT idempotency_key FROM `+db.Table("messages")+` WHERE idempotency_key <> 'k3' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"k1", "k4"}) {
		t.Errorf("retried keys in insert order: %v, want k1, k4", keys)
	}
}
