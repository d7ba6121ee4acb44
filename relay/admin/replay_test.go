package admin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/admin"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// replayFixture archives, on topic orders.*: "old" delivered two hours
// ago, "recent" and "pending" delivered a minute ago ("pending" is in the
// hot table again), "dup" archived as a duplicate; and "other" on another
// topic.
func replayFixture(t *testing.T) *dbtest.Schema {
	t.Helper()
	db := dbtest.New(t)
	insertArchived(t, db, "orders.created", "order-1", "old", 2*time.Hour, false)
	insertArchived(t, db, "orders.created", "order-1", "recent", time.Minute, false)
	insertArchived(t, db, "orders.created", "order-2", "pending", time.Minute, false)
	insertPending(t, db, "orders.created", "order-2", "pending")
	insertArchived(t, db, "orders.created", "order-3", "dup", time.Minute, true)
	insertArchived(t, db, "payments.done", "", "other", time.Minute, false)
	return db
}

func TestReplay_OriginalKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := replayFixture(t)
	opts := admin.ReplayOptions{Topic: "orders.%", DryRun: true}
	dry, err := ops(t, db).Replay(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := admin.ReplayResult{DryRun: true, Matched: 3, Events: 3, SkippedPending: 1, Replayed: 2, ForgottenKeys: 2}
	if dry != want {
		t.Errorf("dry run: %+v\nwant %+v", dry, want)
	}
	if db.Count(t, "messages_all") != 1 || db.Count(t, "delivered_keys") != 4 {
		t.Fatal("the dry run changed the tables")
	}

	opts.DryRun = false
	res, err := ops(t, db).Replay(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	want.DryRun = false
	if res != want {
		t.Errorf("replay: %+v\nwant %+v", res, want)
	}
	if got := column(t, db, "messages", "idempotency_key"); !slices.Equal(got, []string{"old", "pending", "recent"}) {
		t.Errorf("hot table keys: %v, want old, pending, recent", got)
	}
	// The replayed keys are forgotten, so the relay sends them; the pending
	// key and the other topic's key are still remembered.
	if got := column(t, db, "delivered_keys", "idempotency_key"); !slices.Equal(got, []string{"other", "pending"}) {
		t.Errorf("delivered keys: %v, want other, pending", got)
	}
	var fresh int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+db.Table("messages")+`
	   WHERE idempotency_key IN ('old', 'recent') AND attempts = 0 AND leased_by IS NULL
	     AND available_at <= now() AND created_at > now() - interval '1 minute'
	     AND payload = convert_to(idempotency_key, 'UTF8') AND headers->>'content-type' = 'text/plain'`).Scan(&fresh); err != nil {
		t.Fatal(err)
	}
	if fresh != 2 {
		t.Errorf("%d of 2 replayed rows are fresh (due now, created now, attempts 0) with the original payload and headers", fresh)
	}
	if db.Count(t, "archive") != 5 {
		t.Error("the replay changed the archive")
	}
}

func TestReplay_NewKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := replayFixture(t)
	res, err := ops(t, db).Replay(ctx, admin.ReplayOptions{Topic: "orders.created", NewKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	want := admin.ReplayResult{NewKeys: true, Matched: 3, Events: 3, SkippedPending: 1, Replayed: 2}
	if res != want {
		t.Errorf("replay: %+v\nwant %+v", res, want)
	}
	if db.Count(t, "delivered_keys") != 4 {
		t.Error("a replay with new keys deleted delivered keys")
	}
	rows, err := db.Pool.Query(ctx, `SELECT convert_from(payload, 'UTF8'), idempotency_key FROM `+db.Table("messages")+` WHERE idempotency_key <> 'pending' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var payloads []string
	for rows.Next() {
		var payload, key string
		if err := rows.Scan(&payload, &key); err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, payload)
		if key == payload || len(key) != 36 {
			t.Errorf("row replayed from %s has idempotency key %q, want a new UUID", payload, key)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(payloads, []string{"old", "recent"}) {
		t.Errorf("replayed %v, want old and recent", payloads)
	}
}

func TestReplay_TimeRangeAndKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := replayFixture(t)
	now := time.Now()
	for _, tc := range []struct {
		name string
		opts admin.ReplayOptions
		want int64
	}{
		{"delivered in the last hour", admin.ReplayOptions{From: now.Add(-time.Hour)}, 3}, // recent, pending, other
		{"delivered before an hour ago", admin.ReplayOptions{To: now.Add(-time.Hour)}, 1}, // old
		{"created in the last hour", admin.ReplayOptions{From: now.Add(-time.Hour), By: admin.CreatedAt}, 3},
		{"created over an hour ago", admin.ReplayOptions{From: now.Add(-3 * time.Hour), To: now.Add(-time.Hour), By: admin.CreatedAt}, 1},
		{"key", admin.ReplayOptions{Key: "order-1"}, 2},
		{"all", admin.ReplayOptions{All: true}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.DryRun = true
			res, err := ops(t, db).Replay(ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Matched != tc.want {
				t.Errorf("matched %d, want %d", res.Matched, tc.want)
			}
		})
	}
}

func TestReplay_OneEventPerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	// One event delivered twice (replayed once already); the latest
	// delivery is replayed.
	insertArchived(t, db, "a", "", "k", 2*time.Hour, false)
	insertArchived(t, db, "a", "", "k", time.Hour, false)
	db.Exec(t, `UPDATE %s.archive SET payload = 'latest' WHERE delivered_at > now() - interval '90 minutes'`)
	for _, newKeys := range []bool{true, false} {
		res, err := ops(t, db).Replay(ctx, admin.ReplayOptions{All: true, NewKeys: newKeys})
		if err != nil {
			t.Fatal(err)
		}
		if res.Matched != 2 || res.Events != 1 || res.Replayed != 1 {
			t.Errorf("new keys %v: %+v, want 2 matched, 1 event replayed", newKeys, res)
		}
		if got := column(t, db, "messages", "convert_from(payload, 'UTF8')"); !slices.Equal(got, []string{"latest"}) {
			t.Errorf("new keys %v: replayed payloads %v, want the latest delivery's", newKeys, got)
		}
		db.Exec(t, `DELETE FROM %s.messages`)
	}
}

// A replay with original keys is sent by a running relay, not archived as a
// duplicate as a row inserted again by hand with a delivered key is.
func TestReplay_RelaySendsOriginalKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	insertArchived(t, db, "orders.created", "", "replayed", time.Minute, false)
	insertArchived(t, db, "orders.other", "", "copied", time.Minute, false)
	res, err := ops(t, db).Replay(ctx, admin.ReplayOptions{Topic: "orders.created"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed != 1 || res.ForgottenKeys != 1 {
		t.Fatalf("replay: %+v", res)
	}
	insertPending(t, db, "orders.other", "", "copied")

	sink := &sinktest.Memory{}
	startRelay(t, db, relay.Config{Sinks: map[string]sinks.Sink{"nats": sink}})
	waitfor.Condition(t, 10*time.Second, "the hot table to drain", func() bool { return db.Count(t, "messages_all") == 0 })
	if got := slices.Sorted(slices.Values(sink.Keys())); !slices.Equal(got, []string{"replayed"}) {
		t.Errorf("sent %v, want the replay only (the copy's key is still recorded as delivered)", got)
	}
	archive := column(t, db, "archive", "idempotency_key || ':' || duplicate")
	if want := []string{"copied:false", "copied:true", "replayed:false", "replayed:false"}; !slices.Equal(archive, want) {
		t.Errorf("archive (key:duplicate): %v, want %v", archive, want)
	}
	if got := column(t, db, "delivered_keys", "idempotency_key"); !slices.Equal(got, []string{"copied", "replayed"}) {
		t.Errorf("delivered keys: %v, want copied and replayed once each", got)
	}
}
