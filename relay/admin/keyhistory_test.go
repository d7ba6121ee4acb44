package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/admin"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// "What happened to order 42": rows of the key delivered, deduplicated and
// dead-lettered by a real relay, one cancelled by an operator, and rows in
// the hot table in each state, listed oldest first with where each is now;
// another key's rows are not.
func TestKeyHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	const key = "order-42"
	produce := func(topic, key, idemKey string) {
		t.Helper()
		db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key) VALUES ($1, convert_to($3, 'UTF8'), $2, $3)`, topic, key, idemKey)
	}

	// A relay delivers the order's creation and another order's, and
	// dead-letters its payment, which the sink refuses for good; then the
	// creation, written again with its idempotency key, is archived as a
	// duplicate.
	sink := &sinktest.Func{DeliverFunc: func(_ context.Context, msgs []sinks.Message) []error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if m.Topic == "orders.paid" {
				errs[i] = sinks.Permanent(errors.New("card declined"))
			}
		}
		return errs
	}}
	cfg := relay.Config{ID: "relay-1", Schema: db.Name, Sinks: map[string]sinks.Sink{"nats": sink},
		PollInterval: 10 * time.Millisecond, DrainTimeout: time.Second}
	cfg.Logger, _ = testlog.New(t, slog.LevelWarn)
	_, stop := relaytest.Start(t, db.Pool, cfg)
	produce("orders.created", key, "o42-created")
	produce("orders.created", "order-43", "o43-created")
	produce("orders.paid", key, "o42-paid")
	relaytest.WaitDrained(t, db, relaytest.Budget(3))
	produce("orders.created", key, "o42-created")
	relaytest.WaitDrained(t, db, relaytest.Budget(1))
	stop()

	// An operator cancels a row; then rows wait in the hot table: due, in
	// flight, in backoff and delayed.
	produce("orders.shipped", key, "o42-shipped")
	if res, err := ops(t, db).Cancel(ctx, admin.CancelOptions{Key: key}); err != nil || res.Cancelled != 1 {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	db.ExecAsRelay(t, `
INSERT INTO %s.messages (topic, payload, key, idempotency_key, available_at, attempts, leased_by, leased_until, last_error) VALUES
    ('orders.updated', 'xy', 'order-42', 'o42-due',      now(),                       0, NULL,      NULL,                         NULL),
    ('orders.updated', 'xy', 'order-42', 'o42-inflight', now(),                       1, 'relay-2', now() + interval '30 seconds', NULL),
    ('orders.updated', 'xy', 'order-42', 'o42-backoff',  now() + interval '1 minute', 2, NULL,      NULL,                         'webhook responded 503'),
    ('orders.updated', 'xy', 'order-42', 'o42-delayed',  now() + interval '1 hour',   0, NULL,      NULL,                         NULL),
    ('orders.updated', 'xy', 'order-43', 'o43-due',      now(),                       0, NULL,      NULL,                         NULL)`)

	h, err := ops(t, db).KeyHistory(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ idemKey, where, reason, err, leasedBy string }
	want := []row{
		{"o42-created", admin.KeyDelivered, "", "", ""},
		{"o42-paid", admin.KeyDead, "permanent", "card declined", ""},
		{"o42-created", admin.KeyDeduplicated, "", "", ""},
		{"o42-shipped", admin.KeyDead, "cancelled", "cancelled by operator", ""},
		{"o42-due", admin.KeyPending, "", "", ""},
		{"o42-inflight", admin.KeyInFlight, "", "", "relay-2"},
		{"o42-backoff", admin.KeyBackoff, "", "webhook responded 503", ""},
		{"o42-delayed", admin.KeyDelayed, "", "", ""},
	}
	if h.Key != key || h.More || h.At.IsZero() || len(h.Rows) != len(want) {
		t.Fatalf("history: key %q, more %v, at %v, %d rows; want %q, no more, %d rows:\n%s", h.Key, h.More, h.At, len(h.Rows), key, len(want), rowsOf(h))
	}
	for i, r := range h.Rows {
		w := want[i]
		if r.IdempotencyKey != w.idemKey || r.Where != w.where || r.Reason != w.reason || !strings.Contains(r.Error, w.err) ||
			(w.err == "" && r.Error != "") || r.LeasedBy != w.leasedBy || r.At == nil {
			t.Errorf("row %d: %+v\nwant %+v", i, r, w)
		}
		if i > 0 && r.ID <= h.Rows[i-1].ID {
			t.Errorf("row %d: id %d after %d, want ascending ids", i, r.ID, h.Rows[i-1].ID)
		}
	}
	if r := h.Rows[0]; r.Topic != "orders.created" || r.PayloadBytes != len("o42-created") || r.Attempts != 1 || r.CreatedAt.After(*r.At) {
		t.Errorf("the delivered row: %+v, want its topic, payload size, 1 attempt, created before delivered", r)
	}
	if r := h.Rows[6]; r.Attempts != 2 || r.At.Sub(h.At) < 50*time.Second {
		t.Errorf("the row in backoff: %+v, want 2 attempts and its retry in a minute (at %v)", r, h.At)
	}

	// The newest rows, and whether there are older ones.
	for _, tc := range []struct {
		limit int
		first string
		more  bool
	}{{3, "o42-inflight", true}, {7, "o42-paid", true}, {8, "o42-created", false}, {100, "o42-created", false}} {
		h, err := ops(t, db).KeyHistory(ctx, key, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if n := min(tc.limit, len(want)); len(h.Rows) != n || h.Rows[0].IdempotencyKey != tc.first || h.Rows[n-1].IdempotencyKey != "o42-delayed" || h.More != tc.more {
			t.Errorf("limit %d: more %v, rows\n%s\nwant %d rows from %s to o42-delayed, more %v", tc.limit, h.More, rowsOf(h), n, tc.first, tc.more)
		}
	}

	h, err = ops(t, db).KeyHistory(ctx, "order-none", 0)
	if err != nil || len(h.Rows) != 0 || h.Rows == nil || h.More || h.At.IsZero() {
		t.Errorf("a key without rows: %+v, %v; want no rows and the clock", h, err)
	}
}

// rowsOf lists a history's rows, one a line.
func rowsOf(h *admin.KeyHistory) string {
	var b strings.Builder
	for _, r := range h.Rows {
		fmt.Fprintf(&b, "  %d %s %s %q %q\n", r.ID, r.IdempotencyKey, r.Where, r.Reason, r.Error)
	}
	return b.String()
}

// The key history reads each table through its (key, id) index, the
// archive's from migration 18, whatever their sizes: on 200,000 archived
// rows (20,000 keys, a fifth of the rows without one), 20,000 dead letters
// and 5,000 pending rows, no table is scanned, and each index is read
// backwards from the key's newest row.
func TestKeyHistory_ReadsEachTableByItsKeyIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.Exec(t, `
INSERT INTO %s.archive (id, topic, payload, key, idempotency_key, created_at, attempts, delivered_at)
SELECT i, 'orders.created', 'x', CASE WHEN i % 5 <> 0 THEN 'order-' || i % 20000 END, 'a' || i, now(), 1, now() - (200000 - i) * interval '1 second'
  FROM generate_series(1, 200000) AS i`)
	db.Exec(t, `
INSERT INTO %s.dead_letters (id, topic, payload, key, idempotency_key, created_at, attempts, reason, error)
SELECT 200000 + i, 'orders.created', 'x', 'order-' || i % 20000, 'd' || i, now(), 1, 'permanent', 'boom'
  FROM generate_series(1, 20000) AS i`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'orders.created', 'x', 'order-' || i % 20000 FROM generate_series(1, 5000) AS i`)
	db.Exec(t, `ANALYZE %s.archive, %s.dead_letters, %s.messages`)

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	plan := explain(t, tx, statement(t, db, "key_history"), pgx.StrictNamedArgs{"key": "order-42", "limit": 200})
	scans := map[string]string{}
	eachPlanNode(plan, func(n map[string]any) {
		if rel, _ := n["Relation Name"].(string); rel != "" {
			index, _ := n["Index Name"].(string)
			scans[rel] = fmt.Sprintf("%v %v %s", n["Node Type"], n["Scan Direction"], index)
		}
	})
	// The archive is partitioned by time (relay/internal/history): each
	// partition is read through its own copy of archive_key_idx.
	archived := 0
	for rel, scan := range scans {
		if !strings.HasPrefix(rel, "archive_") {
			continue
		}
		archived++
		if !strings.HasPrefix(scan, "Index Scan Backward "+rel+"_key_") {
			t.Errorf("archive partition %s: read by %q, want its key index backwards (plan: %v)", rel, scan, scans)
		}
	}
	if archived == 0 {
		t.Errorf("no partition of the archive read (plan: %v)", scans)
	}
	for table, want := range map[string]string{
		"dead_letters": "Index Scan Backward dead_letters_key_idx",
		"messages":     "Index Scan Backward messages_key_idx",
	} {
		if scans[table] != want {
			t.Errorf("%s: read by %q, want %q (plan: %v)", table, scans[table], want, scans)
		}
	}

	start := time.Now()
	h, err := ops(t, db).KeyHistory(ctx, "order-42", 0)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// order-42's rows: the archived ids 42 + 20,000n, all keyed (none is
	// a multiple of 5), the dead letter 200,042 and one pending row.
	if len(h.Rows) != 10+1+1 || h.More {
		t.Errorf("order-42: %d rows (more %v), want 10 archived, 1 dead, 1 pending:\n%s", len(h.Rows), h.More, rowsOf(h))
	}
	t.Logf("key history of 12 rows among 200,000 archived: %s", took)
}

// statement returns the statement the operations run whose golden file is
// testdata/<name>.sql (TestGoldenSQL checks it is), for db's schema.
func statement(t *testing.T, db *dbtest.Schema, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".sql"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), `"outbox".`, pgx.Identifier{db.Name}.Sanitize()+".")
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
