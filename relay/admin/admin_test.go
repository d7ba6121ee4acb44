package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testdb"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/admin"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// Rows are written with plain SQL, as the relay would have left them. The
// helpers take the columns that matter to a test; %s is the schema.

func insertPending(t *testing.T, db *testdb.Schema, topic, key, idemKey string) {
	t.Helper()
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key) VALUES ($1, 'x', nullif($2, ''), $3)`, topic, key, idemKey)
}

func insertDead(t *testing.T, db *testdb.Schema, topic, key, idemKey, reason, errText string) int64 {
	t.Helper()
	var id int64
	err := db.Pool.QueryRow(context.Background(), `
INSERT INTO `+db.Table("dead_letters")+` (id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason, error)
VALUES ((SELECT coalesce(max(id), 0) + 1 FROM `+db.Table("dead_letters")+`), $1, '\x00ff'::bytea, nullif($2, ''), '{"trace-id": "t1"}',
        $3, 'nats', '2026-01-02T15:04:05Z', 3, $4, $5)
RETURNING id`, topic, key, idemKey, reason, errText).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func insertArchived(t *testing.T, db *testdb.Schema, topic, key, idemKey string, deliveredAgo time.Duration, duplicate bool) {
	t.Helper()
	db.Exec(t, `
INSERT INTO %s.archive (id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, delivered_at, duplicate)
VALUES ((SELECT coalesce(max(id), 0) + 1 FROM %s.archive), $1, convert_to($3, 'UTF8'), nullif($2, ''), '{"content-type": "text/plain"}', $3, NULL,
        now() - $4::interval - interval '1 second', 1, now() - $4::interval, $5)`,
		topic, key, idemKey, deliveredAgo.String(), duplicate)
	if !duplicate {
		db.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key, delivered_at) VALUES ($1, now() - $2::interval)`, idemKey, deliveredAgo.String())
	}
}

// column returns one text column of a table, sorted.
func column(t *testing.T, db *testdb.Schema, table, col string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT "+col+"::text FROM "+db.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestOperations_RefuseAnInvalidSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	if _, err := admin.Status(ctx, db.Pool, "Bad Schema", admin.StatusOptions{}); err == nil {
		t.Error("Status accepted an invalid schema name")
	}
	if _, err := admin.Cancel(ctx, db.Pool, `x"; drop table y`, admin.CancelOptions{Key: "k"}); err == nil {
		t.Error("Cancel accepted an invalid schema name")
	}
}

func TestOperations_RequireAFilterOrAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	insertDead(t, db, "orders.created", "", "k1", "permanent", "boom")
	insertArchived(t, db, "orders.created", "", "k2", time.Minute, false)
	insertPending(t, db, "orders.created", "", "k3")

	onlyLimit := admin.DeadFilter{Limit: 10}
	for name, err := range map[string]error{
		"retry":  second(admin.RetryDead(ctx, db.Pool, db.Name, admin.RetryDeadOptions{DeadFilter: onlyLimit})),
		"purge":  second(admin.PurgeDead(ctx, db.Pool, db.Name, admin.PurgeDeadOptions{DeadFilter: onlyLimit})),
		"replay": second(admin.Replay(ctx, db.Pool, db.Name, admin.ReplayOptions{NewKeys: true})),
		"cancel": second(admin.Cancel(ctx, db.Pool, db.Name, admin.CancelOptions{})),
	} {
		if !errors.Is(err, admin.ErrNoFilter) {
			t.Errorf("%s without a filter: err = %v, want ErrNoFilter", name, err)
		}
	}
	if db.Count(t, "dead_letters") != 1 || db.Count(t, "messages") != 1 || db.Count(t, "delivered_keys") != 1 {
		t.Error("an operation refused for want of a filter changed the tables")
	}
	res, err := admin.PurgeDead(ctx, db.Pool, db.Name, admin.PurgeDeadOptions{DeadFilter: admin.DeadFilter{All: true}})
	if err != nil || res.Purged != 1 {
		t.Errorf("purge with All: %+v, %v; want 1 purged", res, err)
	}
}

func second[T any](_ T, err error) error { return err }

// startRelay runs a relay on db's schema until the test ends, with
// test-friendly timings where cfg leaves them zero.
func startRelay(t *testing.T, db *testdb.Schema, cfg relay.Config) {
	t.Helper()
	cfg.Schema = db.Name
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = time.Second
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := relay.New(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
}

// recordingSink delivers by remembering the idempotency keys it was given.
type recordingSink struct {
	mu   sync.Mutex
	keys []string
}

func (s *recordingSink) Deliver(_ context.Context, msgs []sinks.Message) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.keys = append(s.keys, m.IdempotencyKey)
	}
	return make([]error, len(msgs))
}

func (s *recordingSink) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.keys))
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
