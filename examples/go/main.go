// Command example records an event in the outbox in the same transaction as
// the business change it describes, with the outbox package:
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/go
//
// The relay must have created its schema (it does at start, or run
// `outbox-relay migrate`). RELAY_SCHEMA, when the relay runs with one, names
// the schema here too. Each run pays a new order, so each records a new event:
// its idempotency key, order-<id>-paid, names the business event, not the
// attempt, so that a retry of the same transaction (after a lost COMMIT
// answer, say) is a no-op, and consumers drop a copy they already processed
// by that key.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// Setup for this example only: the business table and a new order.
	id, err := newOrder(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}

	w := outbox.Writer{Schema: os.Getenv("RELAY_SCHEMA"), SkipDuplicates: true}
	n, err := payOrder(ctx, pool, w, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order %d paid; outbox rows inserted: %d (idempotency key order-%d-paid)\n", id, n, id)
}

// payOrder marks an order paid and records the event orders.paid in the same
// transaction: both happen, or neither does. It returns the number of outbox
// rows inserted, 0 when the event is already pending.
func payOrder(ctx context.Context, pool *pgxpool.Pool, w outbox.Writer, id int64) (int64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) // a no-op after Commit

	if _, err := tx.Exec(ctx, "UPDATE example_orders SET status = 'paid' WHERE id = $1", id); err != nil {
		return 0, fmt.Errorf("pay order: %w", err)
	}
	n, err := w.Insert(ctx, tx, outbox.Message{
		Topic:          "orders.paid",
		Payload:        fmt.Appendf(nil, `{"order_id": %d}`, id),
		Key:            fmt.Sprintf("order-%d", id),
		Headers:        map[string]string{"content-type": "application/json"},
		IdempotencyKey: fmt.Sprintf("order-%d-paid", id),
	})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// newOrder creates the example's business table when missing and a new
// unpaid order, and returns its id.
func newOrder(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS example_orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, status text NOT NULL)"); err != nil {
		return 0, fmt.Errorf("create example_orders: %w", err)
	}
	var id int64
	if err := pool.QueryRow(ctx, "INSERT INTO example_orders (status) VALUES ('new') RETURNING id").Scan(&id); err != nil {
		return 0, fmt.Errorf("create order: %w", err)
	}
	return id, nil
}
