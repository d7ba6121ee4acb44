package outbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// Record an event in the same transaction as the business change.
func ExampleInsert() {
	ctx := context.Background()
	pool, cleanup := exampleDatabase(ctx)
	defer cleanup()

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE orders (id int, status text)"); err != nil { // your business change
		panic(err)
	}
	err = outbox.Insert(ctx, tx, outbox.Message{
		Topic:          "orders.created",
		Payload:        []byte(`{"id": 42}`),
		Key:            "order-42",
		Headers:        map[string]string{"content-type": "application/json"},
		IdempotencyKey: "order-42-created",
	})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	var topic, key string
	_ = pool.QueryRow(ctx, "SELECT topic, idempotency_key FROM outbox.messages").Scan(&topic, &key)
	fmt.Println(topic, key)
	// Output: orders.created order-42-created
}

// exampleDatabase migrates the default schema in a scratch database, so that
// the example reads like an application's code.
func exampleDatabase(ctx context.Context) (*pgxpool.Pool, func()) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	name := fmt.Sprintf("outbox_example_%d", os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		panic(fmt.Sprintf("create example database (is PostgreSQL at TEST_DATABASE_URL?): %v", err))
	}
	cfg, _ := pgxpool.ParseConfig(url)
	cfg.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := migrations.Apply(ctx, conn.Conn(), outbox.DefaultSchema); err != nil {
		panic(err)
	}
	conn.Release()
	return pool, func() {
		pool.Close()
		_, _ = admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
		admin.Close()
	}
}
