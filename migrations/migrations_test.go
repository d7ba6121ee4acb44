package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestValidateSchema(t *testing.T) {
	for _, ok := range []string{"outbox", "_x", "a1_b2", strings.Repeat("a", 63)} {
		if err := migrations.ValidateSchema(ok); err != nil {
			t.Errorf("ValidateSchema(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1a", "Outbox", "bad;drop", `a"b`, "a b", "a-b", strings.Repeat("a", 64)} {
		if err := migrations.ValidateSchema(bad); err == nil {
			t.Errorf("ValidateSchema(%q) accepted", bad)
		}
	}
}

func TestApply_ConcurrentReplicasApplyOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	const replicas = 6
	applied := make([]int, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		conn := db.Conn(t)
		wg.Go(func() { applied[i], errs[i] = migrations.Apply(ctx, conn, db.Name) })
	}
	wg.Wait()
	total := 0
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	if total != int(migrations.Latest()) {
		t.Errorf("replicas applied %d migrations in all, want %d (each once)", total, migrations.Latest())
	}
	v, err := migrations.CurrentVersion(ctx, db.Conn(t), db.Name)
	if err != nil || v != migrations.Latest() {
		t.Errorf("CurrentVersion = %d, %v; want %d", v, err, migrations.Latest())
	}
	if n := db.Count(t, "messages_all"); n != 0 {
		t.Errorf("messages holds %d rows", n)
	}
}

func TestRender_IsWhatApplyWouldDo(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	sql, err := migrations.Render(db.Name)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sql, "{{") || !strings.Contains(sql, `"`+db.Name+`".messages`) {
		t.Fatalf("rendered SQL is not qualified with the schema:\n%s", sql)
	}
	conn := db.Conn(t)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("apply rendered SQL: %v", err)
	}
	n, err := migrations.Apply(ctx, conn, db.Name)
	if err != nil || n != 0 {
		t.Errorf("Apply after the printed SQL = %d, %v; want 0 migrations left", n, err)
	}
	if v, _ := migrations.CurrentVersion(ctx, conn, db.Name); v != migrations.Latest() {
		t.Errorf("version after the printed SQL = %d, want %d", v, migrations.Latest())
	}
}

func TestCurrentVersion_IsZeroOnAnEmptySchema(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	v, err := migrations.CurrentVersion(context.Background(), db.Conn(t), db.Name)
	if err != nil || v != 0 {
		t.Errorf("CurrentVersion = %d, %v; want 0, nil", v, err)
	}
}

// A schema of version 7 whose producers chose ids (ahead of the sequence,
// and the id of a dead letter) migrates in place with its pending rows, and
// the sequence carries on past every id in use.
func TestApply_IDsBecomeTheDatabasesInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, q := schemaAt(t, 7,
		"INSERT INTO %[1]s.messages (topic, payload) SELECT 't', 'x' FROM generate_series(1, 3)",
		"INSERT INTO %[1]s.messages (id, topic, payload) OVERRIDING SYSTEM VALUE VALUES (1000, 't', 'chosen')",
		"INSERT INTO %[1]s.dead_letters (id, topic, payload, idempotency_key, created_at, attempts, reason, error) VALUES (5000, 't', 'x', 'k', now(), 1, 'failed', 'e')")
	if n, err := migrations.Apply(ctx, conn, db.Name); err != nil || n != int(migrations.Latest())-7 {
		t.Fatalf("Apply = %d, %v", n, err)
	}
	var id int64
	if err := conn.QueryRow(ctx, "INSERT INTO "+q+".messages (topic, payload) VALUES ('t', 'x') RETURNING id").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id != 5001 {
		t.Errorf("the first row after the upgrade got id %d, want 5001 (past the dead letter's)", id)
	}
	if n := db.Count(t, "messages_all"); n != 5 {
		t.Errorf("%d rows in messages after the upgrade, want the 4 pending and the new one", n)
	}
}

// A schema of version 9 in partitioned mode migrates in place with its
// pending rows: both due indexes become partial (lookups by id can no
// longer walk them), the bucket index on a predicate only the bucket walk
// states (migration 11), and a later switch builds it the same.
func TestApply_DueIndexesBecomePartialInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, q := schemaAt(t, 9,
		"UPDATE %[1]s.relay_mode SET mode = 'partitioned'",
		"SELECT %[1]s.messages_apply_mode()",
		"INSERT INTO %[1]s.messages (topic, payload, key) SELECT 't', 'x', 'k' || i FROM generate_series(1, 50) AS i")
	if _, err := migrations.Apply(ctx, conn, db.Name); err != nil {
		t.Fatal(err)
	}
	predicate := func(index string) string {
		t.Helper()
		var p *string
		if err := conn.QueryRow(ctx, "SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = to_regclass($1)",
			q+"."+index).Scan(&p); err != nil {
			t.Fatalf("%s: %v", index, err)
		}
		if p == nil {
			return ""
		}
		return *p
	}
	want := map[string]string{
		"messages_due_idx":        "(available_at IS NOT NULL)",
		"messages_bucket_due_idx": fmt.Sprintf("((%[1]s.messages_bucket(key, id) >= 0) AND (%[1]s.messages_bucket(key, id) <= 63))", db.Name),
	}
	for index, w := range want {
		if p := predicate(index); p != w {
			t.Errorf("%s: predicate %q after the upgrade; want %s", index, p, w)
		}
	}
	if n := db.Count(t, "messages_all"); n != 50 {
		t.Errorf("%d rows in messages after the upgrade, want the 50 pending", n)
	}
	// Out of partitioned mode and back: the bucket index is built again, partial.
	for _, mode := range []string{"unordered", "partitioned"} {
		if _, err := conn.Exec(ctx, "UPDATE "+q+".relay_mode SET mode = $1", mode); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SELECT "+q+".messages_apply_mode()"); err != nil {
			t.Fatal(err)
		}
	}
	if p, w := predicate("messages_bucket_due_idx"), want["messages_bucket_due_idx"]; p != w {
		t.Errorf("messages_bucket_due_idx: predicate %q after a switch back to partitioned mode; want %s", p, w)
	}
}

// schemaAt returns a new schema migrated to version, after running stmts
// in it (%[1]s: the quoted schema), a connection and the quoted schema.
func schemaAt(t *testing.T, version int32, stmts ...string) (*dbtest.Schema, *pgx.Conn, string) {
	t.Helper()
	ctx := context.Background()
	db := dbtest.NewEmpty(t)
	conn := db.Conn(t)
	q := migrations.Quote(db.Name)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
		t.Fatal(err)
	}
	if err := migrations.MigrateTo(ctx, conn, db.Name, version); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range stmts {
		stmt = fmt.Sprintf(stmt, q)
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return db, conn, q
}

// A schema of version 12 in ordered mode migrates in place with its
// pending rows and its lanes (migration 13): the lanes, their trigger and
// their function are gone, ordered mode's two indexes are built, every
// pending row is a candidate, and producers insert as before.
func TestApply_OrderedModeDropsItsLanesInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, q := schemaAt(t, 12,
		"UPDATE %[1]s.relay_mode SET mode = 'ordered'",
		"SELECT %[1]s.messages_apply_mode()",
		"INSERT INTO %[1]s.messages (topic, payload, key) SELECT 't', 'x', 'k' || (i %% 5) FROM generate_series(1, 50) AS i")
	if n := db.Count(t, "lanes"); n != 5 {
		t.Fatalf("%d lanes before the upgrade, want 5", n)
	}
	if _, err := migrations.Apply(ctx, conn, db.Name); err != nil {
		t.Fatal(err)
	}
	var lanes, trigger, indexes int
	err := conn.QueryRow(ctx, `
SELECT (SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)),
       (SELECT count(*) FROM pg_trigger WHERE tgrelid = $2::regclass AND tgname = 'messages_open_lanes'),
       (SELECT count(*) FROM pg_index WHERE indexrelid IN (to_regclass($3), to_regclass($4)))`,
		q+".lanes", q+".messages", q+".messages_heads_due_idx", q+".messages_waiting_idx").Scan(&lanes, &trigger, &indexes)
	if err != nil {
		t.Fatal(err)
	}
	if lanes != 0 || trigger != 0 || indexes != 2 {
		t.Errorf("after the upgrade: %d lanes tables, %d lane triggers, %d of ordered mode's 2 indexes; want 0, 0, 2", lanes, trigger, indexes)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO "+q+".messages (topic, payload, key, waiting) VALUES ('t', 'x', 'k0', true)"); err != nil {
		t.Fatal(err)
	}
	if n := db.CountWhere(t, "messages_all", "NOT waiting"); n != 51 {
		t.Errorf("%d candidates after the upgrade and an insert that sets waiting, want the 50 pending and the new one", n)
	}
}

// A schema of version 13 migrates in place with its pending rows
// (migration 14): messages_unkeyed_due_idx, which only ordered mode's
// claims walk, is dropped in the other modes and kept in ordered mode, and
// a switch to ordered mode builds it again.
func TestApply_UnkeyedIndexOnlyInOrderedMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rows := "INSERT INTO %[1]s.messages (topic, payload, key) SELECT 't', 'x', CASE WHEN i %% 2 = 0 THEN 'k' || i END FROM generate_series(1, 40) AS i"
	for _, mode := range []string{"unordered", "partitioned", "ordered"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			db, conn, q := schemaAt(t, 13,
				"UPDATE %[1]s.relay_mode SET mode = '"+mode+"'",
				"SELECT %[1]s.messages_apply_mode()",
				rows)
			indexed := func() bool {
				t.Helper()
				var ok bool
				if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+".messages_unkeyed_due_idx").Scan(&ok); err != nil {
					t.Fatal(err)
				}
				return ok
			}
			if !indexed() {
				t.Fatalf("messages_unkeyed_due_idx missing at version 13 in %s mode", mode)
			}
			if _, err := migrations.Apply(ctx, conn, db.Name); err != nil {
				t.Fatal(err)
			}
			if got, want := indexed(), mode == "ordered"; got != want {
				t.Errorf("after the upgrade in %s mode: messages_unkeyed_due_idx exists = %v, want %v", mode, got, want)
			}
			if n := db.Count(t, "messages_all"); n != 40 {
				t.Errorf("%d rows in messages after the upgrade, want the 40 pending", n)
			}
			if _, err := conn.Exec(ctx, "INSERT INTO "+q+".messages (topic, payload) VALUES ('t', 'x')"); err != nil {
				t.Fatalf("a producer's insert after the upgrade: %v", err)
			}
			// A switch to ordered mode builds it, a switch away drops it.
			for _, next := range []string{"ordered", "unordered"} {
				if _, err := conn.Exec(ctx, "UPDATE "+q+".relay_mode SET mode = $1", next); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, "SELECT "+q+".messages_apply_mode()"); err != nil {
					t.Fatal(err)
				}
				if got, want := indexed(), next == "ordered"; got != want {
					t.Errorf("after a switch to %s mode: messages_unkeyed_due_idx exists = %v, want %v", next, got, want)
				}
			}
		})
	}
}

// Migration 26 adds its constraint to messages_all, which takes the
// table's ACCESS EXCLUSIVE lock: behind a transaction that reads
// messages_all it waits at most 5 s, then fails with the lock timeout's
// error, naming the migration, and leaves the schema at version 25; once
// the reader is gone it applies, and the rows pending in the generations
// are all still there, read through messages_all.
func TestApply_LeavingTheParentOutOfPlansWaitsAtMost5sForItsLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, q := schemaAt(t, 25,
		`INSERT INTO %[1]s.messages (topic, payload, key) SELECT 'events.a', 'x', 'k' || (i %% 7) FROM generate_series(1, 100) AS i`)
	reader := db.Conn(t)
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM "+q+".messages_all"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = migrations.Apply(ctx, conn, db.Name)
	waited := time.Since(start)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || !strings.Contains(err.Error(), "026_") {
		t.Fatalf("migrating behind a reader of messages_all: %v; want migration 26's lock timeout (55P03)", err)
	}
	if waited > 20*time.Second {
		t.Errorf("the migration waited %s for its lock; want about 5 s", waited)
	}
	if v, err := migrations.CurrentVersion(ctx, conn, db.Name); err != nil || v != 25 {
		t.Errorf("after the lock timeout the schema is at version %d (%v), want 25", v, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := migrations.Apply(ctx, conn, db.Name); err != nil || n != int(migrations.Latest())-25 {
		t.Fatalf("migrating once the reader is gone applied %d migrations: %v; want %d", n, err, migrations.Latest()-25)
	}
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+q+".messages_all WHERE key IS NOT NULL").Scan(&rows); err != nil || rows != 100 {
		t.Errorf("messages_all holds %d keyed rows after migration 26 (%v), want the 100 pending", rows, err)
	}
}
