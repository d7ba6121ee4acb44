package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestLeastPrivilege_RendersThePsqlScript(t *testing.T) {
	roles := migrations.Roles{Producer: "app", Relay: "Relay Role", Operator: "ops"}
	sql, err := migrations.LeastPrivilege("outbox", roles)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(sql, "\n") {
		if strings.HasPrefix(line, `\`) || strings.Contains(line, `:"`) {
			t.Errorf("rendered grants keep psql syntax: %q", line)
		}
	}
	for _, want := range []string{`ON "outbox".messages TO "app"`, `TO "Relay Role"`, `ON "outbox".dead_letters TO "ops"`} {
		if !strings.Contains(sql, want) {
			t.Errorf("rendered grants lack %s", want)
		}
	}
	if !strings.Contains(migrations.LeastPrivilegeScript(), `\set schema outbox`) {
		t.Error("the psql script does not default schema to outbox")
	}
	if _, err := migrations.LeastPrivilege("outbox", migrations.Roles{Producer: "app", Relay: "relay"}); err == nil {
		t.Error("LeastPrivilege accepted an empty operator role")
	}
	if _, err := migrations.LeastPrivilege("Bad;Schema", roles); err == nil {
		t.Error("LeastPrivilege accepted an invalid schema")
	}
}

// wantDenied fails t unless sql fails with insufficient_privilege.
func wantDenied(t *testing.T, conn *pgx.Conn, what, sql string) {
	t.Helper()
	_, err := conn.Exec(context.Background(), sql)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s: got %v, want permission denied", what, err)
	}
}

func TestLeastPrivilege_ProducerInsertsAndNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := dbtest.NewLeastPrivilege(t)
	q := migrations.Quote(s.Name)
	producer := s.ConnAs(t, s.Producer)

	insert := "INSERT INTO " + q + ".messages (topic, payload, key, headers, idempotency_key) VALUES ($1, $2, $3, $4::jsonb, $5) ON CONFLICT (idempotency_key) DO NOTHING"
	for i, want := range []int64{1, 0} { // the second insert hits ON CONFLICT
		tag, err := producer.Exec(ctx, insert, "orders.created", []byte(`{"id":42}`), "order-42", map[string]string{"content-type": "application/json"}, "order-42-created")
		if err != nil {
			t.Fatalf("producer insert %d: %v", i+1, err)
		}
		if tag.RowsAffected() != want {
			t.Errorf("producer insert %d inserted %d rows, want %d", i+1, tag.RowsAffected(), want)
		}
	}
	if _, err := producer.Exec(ctx, "INSERT INTO "+q+".messages (topic, payload) VALUES ('orders.created', 'x')"); err != nil {
		t.Errorf("producer plain insert: %v", err)
	}
	// Ordered mode's indexes are built with the owner's rights.
	if _, err := s.Pool.Exec(ctx, "UPDATE "+q+".relay_mode SET mode = 'ordered'"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, "SELECT "+q+".messages_apply_mode()"); err != nil { // as a switching relay does
		t.Fatal(err)
	}
	if _, err := producer.Exec(ctx, "INSERT INTO "+q+".messages (topic, payload, key) VALUES ('orders.created', 'x', 'order-43')"); err != nil {
		t.Errorf("producer insert in ordered mode: %v", err)
	}
	var indexed bool
	if err := s.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.Name+".messages_heads_due_idx").Scan(&indexed); err != nil || !indexed {
		t.Errorf("ordered mode's due index of candidates exists: %v, %v; want true", indexed, err)
	}
	if n := s.Count(t, "messages_all"); n != 3 {
		t.Errorf("messages holds %d rows, want 3", n)
	}

	wantDenied(t, producer, "producer UPDATE messages", "UPDATE "+q+".messages SET attempts = 0")
	wantDenied(t, producer, "producer DELETE messages", "DELETE FROM "+q+".messages")
	wantDenied(t, producer, "producer reads payloads", "SELECT payload FROM "+q+".messages")
	wantDenied(t, producer, "producer reads the archive", "SELECT * FROM "+q+".archive")
	wantDenied(t, producer, "producer reads the dead letters", "SELECT * FROM "+q+".dead_letters")
	wantDenied(t, producer, "producer writes waiting", "INSERT INTO "+q+".messages (topic, payload, key, waiting) VALUES ('t', 'x', 'k', true)")
	wantDenied(t, producer, "producer changes the mode", "UPDATE "+q+".relay_mode SET mode = 'unordered'")
	wantDenied(t, producer, "producer creates a table", "CREATE TABLE "+q+".evil (id int)")
	wantDenied(t, producer, "producer writes an id", "INSERT INTO "+q+".messages (id, topic, payload) OVERRIDING SYSTEM VALUE VALUES (1, 't', 'x')")
	wantDenied(t, producer, "producer writes created_at", "INSERT INTO "+q+".messages (topic, payload, created_at) VALUES ('t', 'x', now() - interval '1 day')")
	wantDenied(t, producer, "producer writes a relay column", "INSERT INTO "+q+".messages (topic, payload, attempts) VALUES ('t', 'x', 99)")
}

// The table's owner, who may write every column, still cannot choose a
// row's id or created_at: the insert guard sets them.
func TestGuard_IDAndCreatedAtAreTheDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := dbtest.New(t)
	q := migrations.Quote(s.Name)
	var first int64
	if err := s.Pool.QueryRow(ctx, "INSERT INTO "+q+".messages (topic, payload) VALUES ('t', 'x') RETURNING id").Scan(&first); err != nil {
		t.Fatal(err)
	}
	var id int64
	var old bool
	err := s.Pool.QueryRow(ctx, "INSERT INTO "+q+".messages (id, topic, payload, created_at) OVERRIDING SYSTEM VALUE VALUES ($1, 't', 'x', now() - interval '1 day') RETURNING id, created_at < now()", first+1000).Scan(&id, &old)
	if err != nil {
		t.Fatal(err)
	}
	if id != first+1 || old {
		t.Errorf("insert with id %d and a created_at in the past got id %d (want %d), created_at in the past: %t", first+1000, id, first+1, old)
	}
	// Headers past 16 KiB are refused at insert.
	_, err = s.Pool.Exec(ctx, "INSERT INTO "+q+".messages (topic, payload, headers) VALUES ('t', 'x', jsonb_build_object('x-big', repeat('a', 17000)))")
	if err == nil || !strings.Contains(err.Error(), "headers must be at most 16384 bytes") {
		t.Errorf("insert with 17 KB of headers: %v, want refused", err)
	}
}

func TestApply_OwnerWithoutCreateOnTheDatabaseMigratesItsSchema(t *testing.T) {
	t.Parallel()
	s := dbtest.NewOwnedEmpty(t)
	owner := s.ConnAs(t, s.Owner)
	if n, err := migrations.Apply(context.Background(), owner, s.Name); err != nil || n != int(migrations.Latest()) {
		t.Fatalf("Apply as the schema's owner: %d, %v; want %d migrations", n, err, migrations.Latest())
	}
	if n, err := migrations.Apply(context.Background(), owner, s.Name); err != nil || n != 0 {
		t.Errorf("Apply again: %d, %v; want nothing to do", n, err)
	}
	wantDenied(t, owner, "the owner creates a schema", "CREATE SCHEMA IF NOT EXISTS "+migrations.Quote(s.Name))

	// The same with `outbox-relay migrate --print`, applied by the owner.
	printed := dbtest.NewOwnedEmpty(t)
	sql, err := migrations.Render(printed.Name)
	if err != nil {
		t.Fatal(err)
	}
	conn := printed.ConnAs(t, printed.Owner)
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("the schema's owner applies the printed SQL: %v", err)
	}
	if v, err := migrations.CurrentVersion(context.Background(), conn, printed.Name); err != nil || v != migrations.Latest() {
		t.Errorf("version after the printed SQL = %d, %v; want %d", v, err, migrations.Latest())
	}
}

func TestLeastPrivilege_EveryTableIsGranted(t *testing.T) {
	t.Parallel()
	s := dbtest.NewLeastPrivilege(t)
	rows, err := s.Pool.Query(context.Background(), `
SELECT c.relname, has_table_privilege($2, c.oid, 'SELECT'), has_table_privilege($3, c.oid, 'SELECT'),
       has_table_privilege($2, c.oid, 'TRUNCATE') OR has_table_privilege($3, c.oid, 'TRUNCATE')
  FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
   -- The hot table's generations (messages among them) are read through
   -- messages_all, checked here, whose privileges alone a statement
   -- through it checks; messages' own grants (producers', the operator's
   -- inserts) move with the name when the relay rotates it.
   AND c.oid NOT IN (SELECT g.relid FROM `+migrations.Quote(s.Name)+`.message_generations AS g)
 ORDER BY 1`, s.Name, s.Relay.Name, s.Operator.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	tables := 0
	for rows.Next() {
		var table string
		var relay, operator, truncate bool
		if err := rows.Scan(&table, &relay, &operator, &truncate); err != nil {
			t.Fatal(err)
		}
		tables++
		if !relay || !operator {
			t.Errorf("table %s: the relay may read it: %t, the operator: %t; a new table needs its grants in least_privilege.sql", table, relay, operator)
		}
		if truncate {
			t.Errorf("table %s: a role may TRUNCATE it", table)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if tables < 8 {
		t.Errorf("found %d tables in the schema, want the relay's 8", tables)
	}
}
