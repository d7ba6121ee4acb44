package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// withSearchPath returns url with the connection's search_path set to schema,
// so that the example's unqualified orders table lands in the test schema.
func withSearchPath(url, schema string) string {
	switch {
	case !strings.Contains(url, "://"):
		return url + " search_path=" + schema
	case strings.Contains(url, "?"):
		return url + "&search_path=" + schema
	default:
		return url + "?search_path=" + schema
	}
}

func TestMain_EachRunPaysANewOrderAndRecordsItsEvent(t *testing.T) {
	db := dbtest.New(t)
	t.Setenv("DATABASE_URL", withSearchPath(db.URL, db.Name))
	t.Setenv("RELAY_SCHEMA", db.Name)

	main()
	main() // again: a new order, a new event

	ctx := context.Background()
	var paid int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("example_orders")+" WHERE status = 'paid'").Scan(&paid); err != nil {
		t.Fatal(err)
	}
	if paid != 2 {
		t.Errorf("%d orders paid, want 2", paid)
	}
	rows, err := db.Pool.Query(ctx, "SELECT topic, key, idempotency_key, payload, headers FROM "+db.Table("messages")+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for id := 1; rows.Next(); id++ {
		var (
			topic, key, idempotencyKey string
			payload                    []byte
			headers                    map[string]string
		)
		if err := rows.Scan(&topic, &key, &idempotencyKey, &payload, &headers); err != nil {
			t.Fatal(err)
		}
		if topic != "orders.paid" || key != fmt.Sprintf("order-%d", id) || idempotencyKey != fmt.Sprintf("order-%d-paid", id) ||
			string(payload) != fmt.Sprintf(`{"order_id": %d}`, id) || len(headers) != 1 || headers["content-type"] != "application/json" {
			t.Errorf("row %d = %q %q %q %q %v", id, topic, key, idempotencyKey, payload, headers)
		}
	}
	if n := db.Count(t, "messages"); n != 2 {
		t.Errorf("%d outbox rows, want 2", n)
	}
}

func TestPayOrder_FailedOutboxInsertRollsBackTheBusinessChange(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(withSearchPath(db.URL, db.Name))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id, err := newOrder(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}

	// An outbox that does not exist: the insert fails after the UPDATE.
	if _, err := payOrder(ctx, pool, outbox.Writer{Schema: db.Name + "_missing"}, id); err == nil {
		t.Fatal("payOrder succeeded without an outbox table")
	}
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM example_orders WHERE id = $1", id).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "new" {
		t.Errorf("order %d is %q after a failed transaction, want new: the business change and the event commit together", id, status)
	}

	w := outbox.Writer{Schema: db.Name, SkipDuplicates: true}
	n, err := payOrder(ctx, pool, w, id)
	if err != nil || n != 1 {
		t.Fatalf("payOrder = %d, %v; want 1, nil", n, err)
	}
	// The same transaction again (a retry after a lost COMMIT answer): the
	// event's key is pending, the insert is a no-op.
	if n, err := payOrder(ctx, pool, w, id); err != nil || n != 0 {
		t.Fatalf("payOrder again = %d, %v; want 0, nil", n, err)
	}
	if got := db.Count(t, "messages"); got != 1 {
		t.Errorf("%d outbox rows, want 1", got)
	}
}
