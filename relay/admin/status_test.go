package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	// Default sink: two due rows (one 10 minutes old), one in flight, one
	// in backoff, one delayed. Destination webhook: one due row.
	db.ExecAsRelay(t, `
INSERT INTO %s.messages (topic, payload, destination, available_at, attempts, leased_by, leased_until) VALUES
    ('a', 'x', NULL,      now() - interval '10 minutes', 0, NULL,      NULL),
    ('a', 'x', NULL,      now(),                         1, 'relay-1', now() - interval '1 second'),
    ('a', 'x', NULL,      now(),                         1, 'relay-1', now() + interval '30 seconds'),
    ('a', 'x', NULL,      now() + interval '1 minute',   2, NULL,      NULL),
    ('a', 'x', NULL,      now() + interval '1 hour',     0, NULL,      NULL),
    ('a', 'x', 'webhook', now(),                         0, NULL,      NULL)`)
	insertDead(t, db, "a", "", "d1", "permanent", "boom")
	insertDead(t, db, "a", "", "d2", "permanent", "boom")
	insertDead(t, db, "a", "", "d3", "exhausted", "after 25 attempts: timeout")
	insertArchived(t, db, "a", "", "a1", time.Minute, false)
	insertArchived(t, db, "a", "", "a2", time.Minute, false)
	insertArchived(t, db, "a", "", "a1", time.Second, true)

	st, err := ops(t, db).Status(ctx, admin.StatusOptions{DefaultSink: "nats", ExactCounts: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Destinations) != 2 || st.Destinations[0].Destination != "nats" || st.Destinations[1].Destination != "webhook" {
		t.Fatalf("destinations = %+v, want nats and webhook", st.Destinations)
	}
	n := st.Destinations[0]
	if n.Pending != 5 || n.Due != 2 || n.InFlight != 1 || n.Backoff != 1 || n.Delayed != 1 {
		t.Errorf("nats: pending %d, due %d, in flight %d, backoff %d, delayed %d; want 5, 2, 1, 1, 1",
			n.Pending, n.Due, n.InFlight, n.Backoff, n.Delayed)
	}
	if n.OldestDueAt == nil || n.OldestDueAgeSeconds < 590 || n.OldestDueAgeSeconds > 900 {
		t.Errorf("nats: oldest due age %vs (at %v), want about 600s", n.OldestDueAgeSeconds, n.OldestDueAt)
	}
	if n.NextRetryAt == nil || n.NextRetryAt.Sub(st.At) < 50*time.Second || n.NextDelayedAt == nil || n.NextDelayedAt.Sub(st.At) < 50*time.Minute {
		t.Errorf("nats: next retry %v, next delayed %v, at %v; want in a minute and in an hour", n.NextRetryAt, n.NextDelayedAt, st.At)
	}
	if w := st.Destinations[1]; w.Pending != 1 || w.Due != 1 {
		t.Errorf("webhook: %+v, want 1 due row", w)
	}
	if total := st.Total(); total.Pending != 6 || total.Due != 3 {
		t.Errorf("total: %+v, want 6 pending, 3 due", total)
	}

	if len(st.Leases) != 1 || st.Leases[0].RelayID != "relay-1" || st.Leases[0].Rows != 1 || !st.Leases[0].EarliestLeaseEnd.After(st.At) {
		t.Errorf("leases = %+v, want relay-1 holding 1 row (its expired lease does not count)", st.Leases)
	}

	dl := st.DeadLetters
	if dl.Total != 3 || len(dl.ByReason) != 2 || dl.ByReason[0] != (admin.CountSince{Value: "permanent", Count: 2, LastFailedAt: dl.ByReason[0].LastFailedAt}) {
		t.Errorf("dead letters by reason = %+v (total %d), want permanent 2 first, of 3", dl.ByReason, dl.Total)
	}
	if len(dl.TopErrors) != 2 || dl.TopErrors[0].Value != "boom" || dl.TopErrors[0].Count != 2 {
		t.Errorf("top errors = %+v, want boom ×2 first", dl.TopErrors)
	}

	want := map[string]int64{"messages": 6, "archive": 3, "delivered_keys": 2, "dead_letters": 3}
	if len(st.Tables) != 4 {
		t.Fatalf("tables = %+v, want 4", st.Tables)
	}
	for _, tb := range st.Tables {
		if tb.Rows != want[tb.Table] || !tb.RowsExact || tb.TotalBytes <= 0 {
			t.Errorf("table %s: %d rows (exact %v), %d bytes; want %d exact rows and a size", tb.Table, tb.Rows, tb.RowsExact, tb.TotalBytes, want[tb.Table])
		}
	}

	// The hot table's generations: slot 1 (the table before migration 24)
	// current, two empty spares outside messages_all.
	if g := st.Generations; len(g) != 3 || g[0].State != "current" || g[0].Table != "messages" || !g[0].Attached ||
		g[1].State != "spare" || g[1].Attached || g[2].Table != "messages_g3" || g[0].TotalBytes <= 0 {
		t.Errorf("generations = %+v, want slot 1 current as messages, two spares taken out of messages_all", g)
	}

	// Without ExactCounts the archive and delivered_keys are estimated.
	st, err = ops(t, db).Status(ctx, admin.StatusOptions{TopErrors: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st.Destinations[0].Destination != admin.DefaultSinkLabel || len(st.DeadLetters.TopErrors) != 1 {
		t.Errorf("defaults: destination %q, %d top errors; want %q and 1", st.Destinations[0].Destination, len(st.DeadLetters.TopErrors), admin.DefaultSinkLabel)
	}
	for _, tb := range st.Tables {
		if exact := tb.Table == "messages" || tb.Table == "dead_letters"; tb.RowsExact != exact {
			t.Errorf("table %s: rows exact = %v without ExactCounts", tb.Table, tb.RowsExact)
		}
	}
}

func TestStatus_EmptySchema(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	st, err := ops(t, db).Status(context.Background(), admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Destinations) != 0 || len(st.Leases) != 0 || st.DeadLetters.Total != 0 || len(st.Tables) != 4 {
		t.Errorf("empty schema: %+v", st)
	}
}

func TestStatus_OrderedModeShowsRelaysBlockedKeysAndWaitingRows(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.SetMode(t, "ordered")
	db.Exec(t, `INSERT INTO %s.relays (id, version, mode, last_seen) VALUES
	            ('relay-a', 'v1', 'ordered', now()), ('relay-gone', 'v0', 'ordered', now() - interval '5 minutes')`)
	// Key k: a head that failed twice, in backoff, with 3 rows behind it;
	// key j: a fresh head and one row behind; one row without a key.
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES
	            ('t', 'x', 'k'), ('t', 'x', 'k'), ('t', 'x', 'k'), ('t', 'x', 'k'), ('t', 'x', 'j'), ('t', 'x', 'j'), ('t', 'x', NULL)`)
	db.Exec(t, `UPDATE %s.messages SET attempts = 2, last_error = 'webhook responded 503', available_at = now() + interval '1 minute'
	            WHERE id = (SELECT min(id) FROM %s.messages WHERE key = 'k')`)
	st, err := ops(t, db).Status(context.Background(), admin.StatusOptions{DefaultSink: "webhook"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != "ordered" || len(st.Relays) != 2 || !st.Relays[0].Alive || st.Relays[0].ID != "relay-a" || st.Relays[1].Alive {
		t.Errorf("mode %q, relays %+v", st.Mode, st.Relays)
	}
	if len(st.BlockedKeys) != 1 || st.BlockedKeys[0].Key != "k" || st.BlockedKeys[0].Attempts != 2 ||
		st.BlockedKeys[0].LastError != "webhook responded 503" || st.BlockedKeys[0].Rows != 4 {
		t.Errorf("blocked keys %+v, want k with 2 attempts, its error and 4 rows", st.BlockedKeys)
	}
	total := st.Total()
	if total.Waiting != 4 || total.Due != 2 || total.Backoff != 1 {
		t.Errorf("waiting %d, due %d, backoff %d; want 4 rows waiting on their keys, 2 due (j's head, the unkeyed row), 1 in backoff",
			total.Waiting, total.Due, total.Backoff)
	}
}

func TestStatus_PartitionedModeShowsWhoHoldsWhichBucketsAndTheirBacklog(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.SetMode(t, "partitioned")
	db.Exec(t, `INSERT INTO %s.relays (id, version, mode, last_seen) VALUES
	            ('relay-a', 'v1', 'partitioned', now()), ('relay-b', 'v1', 'partitioned', now())`)
	// relay-a holds 0-31, relay-b 32-47; 48-63 are held by a lease that ran
	// out, so by nobody.
	db.Exec(t, `UPDATE %s.buckets SET owner = 'relay-a', epoch = 3, lease_until = now() + interval '10 seconds' WHERE bucket < 32`)
	db.Exec(t, `UPDATE %s.buckets SET owner = 'relay-b', epoch = 4, lease_until = now() + interval '10 seconds' WHERE bucket BETWEEN 32 AND 47`)
	db.Exec(t, `UPDATE %s.buckets SET owner = 'relay-gone', epoch = 2, lease_until = now() - interval '1 second' WHERE bucket >= 48`)
	// Unkeyed rows go to bucket id mod 64: 64 rows, one in each bucket.
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 't', 'x' FROM generate_series(1, 64)`)
	st, err := ops(t, db).Status(context.Background(), admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Buckets) != 3 {
		t.Fatalf("bucket owners %+v, want relay-a, relay-b and nobody", st.Buckets)
	}
	a, b, nobody := st.Buckets[0], st.Buckets[1], st.Buckets[2]
	if a.RelayID != "relay-a" || len(a.Buckets) != 32 || a.Epoch != 3 || a.Due != 32 || a.LastSeen == nil || a.LeaseUntil == nil || !a.LeaseUntil.After(st.At) {
		t.Errorf("relay-a: %+v, want 32 buckets, epoch 3, 32 due rows, its heartbeat and lease", a)
	}
	if b.RelayID != "relay-b" || len(b.Buckets) != 16 || b.Buckets[0] != 32 || b.Epoch != 4 || b.Due != 16 {
		t.Errorf("relay-b: %+v, want buckets 32-47, epoch 4, 16 due rows", b)
	}
	if nobody.RelayID != "" || len(nobody.Buckets) != 16 || nobody.Due != 16 || nobody.LeaseUntil != nil {
		t.Errorf("nobody: %+v, want buckets 48-63 with 16 due rows", nobody)
	}
}
