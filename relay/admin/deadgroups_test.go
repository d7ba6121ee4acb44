package admin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

func TestDeadGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	failedAt := func(id int64, at string) {
		t.Helper()
		db.Exec(t, `UPDATE %s.dead_letters SET failed_at = $2 WHERE id = $1`, id, at)
	}
	// Gone: 3 on two topics, the newest failure not the highest id.
	gone1 := insertDead(t, db, "orders.created", "", "g1", "permanent", "webhook responded 410: Gone")
	gone2 := insertDead(t, db, "orders.paid", "", "g2", "permanent", "webhook responded 410: Gone")
	gone3 := insertDead(t, db, "orders.created", "", "g3", "permanent", "webhook responded 410: Gone")
	failedAt(gone1, "2026-03-01T10:00:00Z")
	failedAt(gone2, "2026-03-01T10:05:00Z")
	failedAt(gone3, "2026-03-01T10:02:00Z")
	// Timeouts: 3 as well, failed later, the last two at once.
	timeout1 := insertDead(t, db, "orders.created", "", "t1", "exhausted", "after 25 attempts: timeout")
	timeout2 := insertDead(t, db, "orders.created", "", "t2", "exhausted", "after 25 attempts: timeout")
	timeout3 := insertDead(t, db, "orders.created", "", "t3", "exhausted", "after 25 attempts: timeout")
	failedAt(timeout1, "2026-03-01T11:00:00Z")
	failedAt(timeout2, "2026-03-01T11:10:00Z")
	failedAt(timeout3, "2026-03-01T11:10:00Z")
	// One error text under two reasons: two causes.
	boomPermanent := insertDead(t, db, "payments.done", "", "b1", "permanent", "boom")
	boomExhausted := insertDead(t, db, "payments.done", "", "b2", "exhausted", "boom")
	failedAt(boomPermanent, "2026-03-01T09:00:00Z")
	failedAt(boomExhausted, "2026-03-01T09:30:00Z")

	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := []admin.DeadGroup{
		{Reason: "exhausted", Error: "after 25 attempts: timeout", Count: 3, FirstFailedAt: at("2026-03-01T11:00:00Z"),
			LastFailedAt: at("2026-03-01T11:10:00Z"), Topics: 1, ExampleID: timeout3},
		{Reason: "permanent", Error: "webhook responded 410: Gone", Count: 3, FirstFailedAt: at("2026-03-01T10:00:00Z"),
			LastFailedAt: at("2026-03-01T10:05:00Z"), Topics: 2, ExampleID: gone2},
		{Reason: "exhausted", Error: "boom", Count: 1, FirstFailedAt: at("2026-03-01T09:30:00Z"),
			LastFailedAt: at("2026-03-01T09:30:00Z"), Topics: 1, ExampleID: boomExhausted},
		{Reason: "permanent", Error: "boom", Count: 1, FirstFailedAt: at("2026-03-01T09:00:00Z"),
			LastFailedAt: at("2026-03-01T09:00:00Z"), Topics: 1, ExampleID: boomPermanent},
	}
	groups, err := ops(t, db).DeadGroups(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if groups.Total != 8 || groups.Groups != 4 || !equalGroups(groups.Listed, want) {
		t.Errorf("groups: total %d, %d groups, listed\n%+v\nwant 8 in 4 groups:\n%+v", groups.Total, groups.Groups, groups.Listed, want)
	}

	// The largest two; the totals count every group.
	groups, err = ops(t, db).DeadGroups(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if groups.Total != 8 || groups.Groups != 4 || !equalGroups(groups.Listed, want[:2]) {
		t.Errorf("limit 2: total %d, %d groups, listed %+v; want 8 in 4 groups, the first two listed", groups.Total, groups.Groups, groups.Listed)
	}

	db.Exec(t, `DELETE FROM %s.dead_letters`)
	groups, err = ops(t, db).DeadGroups(ctx, 0)
	if err != nil || groups.Total != 0 || groups.Groups != 0 || groups.Listed == nil || len(groups.Listed) != 0 {
		t.Errorf("no dead letters: %+v, %v", groups, err)
	}
}

// equalGroups compares groups, their times as instants.
func equalGroups(got, want []admin.DeadGroup) bool {
	return slices.EqualFunc(got, want, func(a, b admin.DeadGroup) bool {
		return a.Reason == b.Reason && a.Error == b.Error && a.Count == b.Count && a.FirstFailedAt.Equal(b.FirstFailedAt) &&
			a.LastFailedAt.Equal(b.LastFailedAt) && a.Topics == b.Topics && a.ExampleID == b.ExampleID
	})
}

// A group (its reason and error text, DeadFilter.ErrorIs) selects its dead
// letters and no other: not those of an error text that contains it, nor
// of one that differs only in case, nor of the same text under another
// reason. ListDead lists them, RetryDead and PurgeDead move and delete
// them.
func TestDeadGroups_AGroupSelectsItsLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	const gone = "webhook responded 410: Gone"
	a := insertDead(t, db, "orders.created", "", "k1", "permanent", gone)
	b := insertDead(t, db, "orders.created", "", "k2", "permanent", gone)
	longer := insertDead(t, db, "orders.created", "", "k3", "permanent", gone+" (twice)")
	upper := insertDead(t, db, "orders.created", "", "k4", "permanent", "WEBHOOK RESPONDED 410: GONE")
	exhausted := insertDead(t, db, "orders.created", "", "k5", "exhausted", gone)

	groups, err := ops(t, db).DeadGroups(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if groups.Groups != 4 || groups.Listed[0].Reason != "permanent" || groups.Listed[0].Error != gone || groups.Listed[0].Count != 2 {
		t.Fatalf("groups %+v, want 4, the permanent %q with 2 first", groups, gone)
	}
	g := groups.Listed[0]
	group := admin.DeadFilter{Reason: g.Reason, ErrorIs: g.Error}

	list, err := ops(t, db).ListDead(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if ids := deadIDs(list); list.Matched != g.Count || !slices.Equal(ids, []int64{a, b}) {
		t.Errorf("the group's letters: %v (matched %d), want %d and %d", ids, list.Matched, a, b)
	}
	if list := mustList(t, db, admin.DeadFilter{Error: gone}); list.Matched != 5 {
		t.Errorf("Error (contains, any case) matched %d, want all 5: ErrorIs is the narrower", list.Matched)
	}

	dry, err := ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: group, DryRun: true})
	if err != nil || dry.Matched != 2 || dry.Retried != 2 {
		t.Fatalf("retry the group, dry run: %+v, %v; want 2 to retry", dry, err)
	}
	res, err := ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: group})
	if err != nil || res.Matched != 2 || res.Retried != 2 {
		t.Fatalf("retry the group: %+v, %v; want 2 retried", res, err)
	}
	if got := column(t, db, "messages", "idempotency_key"); !slices.Equal(got, []string{"k1", "k2"}) {
		t.Errorf("back in the hot table: %v, want k1 and k2", got)
	}
	if ids := deadIDs(mustList(t, db, admin.DeadFilter{})); !slices.Equal(ids, []int64{longer, upper, exhausted}) {
		t.Errorf("dead letters left: %v, want the other groups' %d, %d, %d", ids, longer, upper, exhausted)
	}

	// ErrorIs alone is a filter; with the reason, one group again.
	other := admin.DeadFilter{Reason: "exhausted", ErrorIs: gone}
	purge, err := ops(t, db).PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: other, DryRun: true})
	if err != nil || purge.Purged != 1 {
		t.Fatalf("purge the exhausted group, dry run: %+v, %v; want 1", purge, err)
	}
	if purge, err = ops(t, db).PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: other}); err != nil || purge.Purged != 1 {
		t.Fatalf("purge the exhausted group: %+v, %v; want 1 purged", purge, err)
	}
	if purge, err = ops(t, db).PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: admin.DeadFilter{ErrorIs: "WEBHOOK RESPONDED 410: GONE"}}); err != nil || purge.Purged != 1 {
		t.Fatalf("purge by ErrorIs alone: %+v, %v; want 1 purged", purge, err)
	}
	if ids := deadIDs(mustList(t, db, admin.DeadFilter{})); !slices.Equal(ids, []int64{longer}) {
		t.Errorf("dead letters left: %v, want %d", ids, longer)
	}
}

// deadIDs returns the ids of a listing, in its order.
func deadIDs(list *admin.DeadList) []int64 {
	var ids []int64
	for _, l := range list.Letters {
		ids = append(ids, l.ID)
	}
	return ids
}

// 100,000 dead letters of 20 recurring errors and 1,000 errors of their
// own are grouped in one pass over the table, hashed, not sorted: no sort
// in the plan takes more than the groups.
func TestDeadGroups_100000DeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.Exec(t, `
INSERT INTO %s.dead_letters (id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason, error, failed_at)
SELECT i, 'orders.' || i % 7, '\x00ff'::bytea, 'order-' || i % 5000, '{"trace-id": "t1"}', 'k' || i, 'nats', now() - interval '1 day', 25,
       CASE WHEN i % 100 = 0 OR i % 20 < 10 THEN 'permanent' ELSE 'exhausted' END,
       CASE WHEN i % 100 = 0 THEN 'webhook: dial tcp 10.0.' || i % 255 || '.' || i / 255 % 255 || ':443: connection reset by peer (request ' || i || ')'
            ELSE 'webhook responded ' || 500 + i % 20 || ': Service Unavailable; the upstream timed out after 30s, retry later' END,
       now() - (i % 86400) * interval '1 second'
  FROM generate_series(1, 100000) AS i`)
	db.Exec(t, `ANALYZE %s.dead_letters`)

	var best time.Duration
	var groups *admin.DeadGroups
	for range 5 {
		start := time.Now()
		g, err := ops(t, db).DeadGroups(ctx, 0)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if best == 0 || took < best {
			best = took
		}
		groups = g
	}
	t.Logf("DeadGroups over 100,000 dead letters in 1,020 groups: %s (best of 5)", best)
	// 19 recurring errors 5,000 times each, one (every 20th row) 4,000
	// times: every 100th row failed with an error of its own.
	if groups.Total != 100000 || groups.Groups != 1020 || len(groups.Listed) != admin.DeadGroupsDefault ||
		groups.Listed[0].Count != 5000 || groups.Listed[18].Count != 5000 || groups.Listed[19].Count != 4000 || groups.Listed[20].Count != 1 ||
		groups.Listed[0].Topics != 7 {
		t.Errorf("groups: total %d, %d groups, %d listed, first %+v, 19th-21st %+v",
			groups.Total, groups.Groups, len(groups.Listed), groups.Listed[0], groups.Listed[18:21])
	}

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	plan := explain(t, tx, statement(t, db, "dead_letters_groups"), pgx.StrictNamedArgs{"limit": admin.DeadGroupsDefault})
	eachPlanNode(plan, func(n map[string]any) {
		if rows, _ := n["Actual Rows"].(float64); n["Node Type"] == "Sort" && rows > 1020 {
			t.Errorf("the plan sorts %v rows: %v", rows, n["Sort Key"])
		}
		if n["Node Type"] == "Seq Scan" && n["Actual Loops"].(float64) > 1 {
			t.Errorf("the plan reads the dead letters %v times", n["Actual Loops"])
		}
	})
}
