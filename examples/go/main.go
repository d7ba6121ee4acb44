// Command example records an event in the outbox in the same transaction as
// the business change it describes, with the outbox package:
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/go
//
// The relay must have created its schema (it does at start, or run
// `outbox-relay migrate`). RELAY_SCHEMA, when the relay runs with one, names
// the schema here too. Run it twice: the second outbox insert is a no-op while
// the first is pending, because the idempotency key is the same.
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

	// Setup for this example only: the business table and an order to pay.
	if err := setup(ctx, pool, 42); err != nil {
		log.Fatal(err)
	}

	w := outbox.Writer{Schema: os.Getenv("RELAY_SCHEMA"), SkipDuplicates: true}
	n, err := payOrder(ctx, pool, w, 42)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order 42 paid; outbox rows inserted: %d\n", n)
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

	if _, err := tx.Exec(ctx, "UPDATE orders SET status = 'paid' WHERE id = $1", id); err != nil {
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

// setup creates the example's business table and an unpaid order.
func setup(ctx context.Context, pool *pgxpool.Pool, id int64) error {
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)"); err != nil {
		return fmt.Errorf("create orders: %w", err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO orders (id, status) VALUES ($1, 'new') ON CONFLICT (id) DO NOTHING", id); err != nil {
		return fmt.Errorf("create order: %w", err)
	}
	return nil
}
