package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/testdb"
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

func TestMain_PaysTheOrderAndRecordsTheEventOnce(t *testing.T) {
	db := testdb.New(t)
	t.Setenv("DATABASE_URL", withSearchPath(db.URL, db.Name))
	t.Setenv("RELAY_SCHEMA", db.Name)

	main()
	main() // again: the pending idempotency key makes the second insert a no-op

	ctx := context.Background()
	var status string
	if err := db.Pool.QueryRow(ctx, "SELECT status FROM "+db.Table("orders")+" WHERE id = 42").Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "paid" {
		t.Errorf("order 42 is %q, want paid", status)
	}
	var (
		topic, key, idempotencyKey string
		payload                    []byte
		headers                    map[string]string
	)
	err := db.Pool.QueryRow(ctx, "SELECT topic, key, idempotency_key, payload, headers FROM "+db.Table("messages")).
		Scan(&topic, &key, &idempotencyKey, &payload, &headers)
	if err != nil {
		t.Fatalf("read the one outbox row: %v", err)
	}
	if topic != "orders.paid" || key != "order-42" || idempotencyKey != "order-42-paid" ||
		string(payload) != `{"order_id": 42}` || len(headers) != 1 || headers["content-type"] != "application/json" {
		t.Errorf("row = %q %q %q %q %v", topic, key, idempotencyKey, payload, headers)
	}
}

func TestPayOrder_FailedOutboxInsertRollsBackTheBusinessChange(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
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
	if err := setup(ctx, pool, 7); err != nil {
		t.Fatal(err)
	}

	// An outbox that does not exist: the insert fails after the UPDATE.
	if _, err := payOrder(ctx, pool, outbox.Writer{Schema: db.Name + "_missing"}, 7); err == nil {
		t.Fatal("payOrder succeeded without an outbox table")
	}
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM orders WHERE id = 7").Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "new" {
		t.Errorf("order 7 is %q after a failed transaction, want new: the business change and the event commit together", status)
	}

	n, err := payOrder(ctx, pool, outbox.Writer{Schema: db.Name}, 7)
	if err != nil || n != 1 {
		t.Fatalf("payOrder = %d, %v; want 1, nil", n, err)
	}
	if got := db.Count(t, "messages"); got != 1 {
		t.Errorf("%d outbox rows, want 1", got)
	}
}
