package admin_test

import (
	"context"
	"errors"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// Rows are written with plain SQL, as the relay would have left them. The
// helpers take the columns that matter to a test; %s is the schema.

func insertPending(t *testing.T, db *dbtest.Schema, topic, key, idemKey string) {
	t.Helper()
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key) VALUES ($1, 'x', nullif($2, ''), $3)`, topic, key, idemKey)
}

func insertDead(t *testing.T, db *dbtest.Schema, topic, key, idemKey, reason, errText string) int64 {
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

func insertArchived(t *testing.T, db *dbtest.Schema, topic, key, idemKey string, deliveredAgo time.Duration, duplicate bool) {
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
func column(t *testing.T, db *dbtest.Schema, table, col string) []string {
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
	db := dbtest.New(t)
	for _, schema := range []string{"Bad Schema", `x"; drop table y`, ""} {
		if _, err := admin.New(db.Pool, schema); err == nil {
			t.Errorf("New accepted the schema name %q", schema)
		}
	}
}

func TestOperations_RequireAFilterOrAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	insertDead(t, db, "orders.created", "", "k1", "permanent", "boom")
	insertArchived(t, db, "orders.created", "", "k2", time.Minute, false)
	insertPending(t, db, "orders.created", "", "k3")

	onlyLimit := admin.DeadFilter{Limit: 10}
	for name, err := range map[string]error{
		"retry":  second(ops(t, db).RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: onlyLimit})),
		"purge":  second(ops(t, db).PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: onlyLimit})),
		"replay": second(ops(t, db).Replay(ctx, admin.ReplayOptions{NewKeys: true})),
		"cancel": second(ops(t, db).Cancel(ctx, admin.CancelOptions{})),
	} {
		if !errors.Is(err, admin.ErrNoFilter) {
			t.Errorf("%s without a filter: err = %v, want ErrNoFilter", name, err)
		}
	}
	if db.Count(t, "dead_letters") != 1 || db.Count(t, "messages_all") != 1 || db.Count(t, "delivered_keys") != 1 {
		t.Error("an operation refused for want of a filter changed the tables")
	}
	res, err := ops(t, db).PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: admin.DeadFilter{All: true}})
	if err != nil || res.Purged != 1 {
		t.Errorf("purge with All: %+v, %v; want 1 purged", res, err)
	}
}

// ops returns the operations on db's schema.
func ops(t *testing.T, db *dbtest.Schema) *admin.Admin {
	t.Helper()
	a, err := admin.New(db.Pool, db.Name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func second[T any](_ T, err error) error { return err }

// startRelay runs a relay on db's schema until the test ends, with
// test-friendly timings where cfg leaves them zero.
func startRelay(t *testing.T, db *dbtest.Schema, cfg relay.Config) {
	t.Helper()
	cfg.Schema = db.Name
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = time.Second
	}
	cfg.Logger, _ = testlog.New(t, slog.LevelWarn)
	relaytest.Start(t, db.Pool, cfg)
}
