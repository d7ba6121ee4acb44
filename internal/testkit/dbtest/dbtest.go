// Package dbtest gives each test a fresh schema on a real PostgreSQL,
// migrated to the latest version and dropped when the test ends.
//
// The database is TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/postgres. When none is reachable the
// test fails with instructions: database tests never skip.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// DefaultURL is the database used when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// URL returns the test database's connection string.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Schema is a fresh, migrated schema for one test.
type Schema struct {
	// Name is the schema, to pass as RELAY_SCHEMA.
	Name string
	// Pool reaches the database; its connections are named Name in
	// pg_stat_activity (application_name).
	Pool *pgxpool.Pool
	// URL is the database's connection string.
	URL string
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// New creates a migrated schema for t and drops it at cleanup.
func New(t testing.TB) *Schema {
	t.Helper()
	s := NewEmpty(t)
	conn := s.Conn(t)
	if _, err := migrations.Apply(context.Background(), conn, s.Name); err != nil {
		t.Fatalf("migrate test schema %s: %v", s.Name, err)
	}
	return s
}

// NewEmpty reserves a schema name for t, without creating it, and drops the
// schema at cleanup if something created it.
func NewEmpty(t testing.TB) *Schema {
	t.Helper()
	ctx := context.Background()
	name := schemaName(t.Name())
	url := URL()

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL is not a valid connection string: %v", err)
	}
	cfg.MaxConns = 8 // two test suites at once must fit in max_connections (100 by default)
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = ping(ctx, pool)
	}
	if err != nil {
		t.Fatalf("no PostgreSQL reachable at %s: %v\n"+
			"These tests need a real database and never skip. Start one (Debian: apt-get install postgresql && pg_ctlcluster 15 main start,\n"+
			"with trust auth for 127.0.0.1) or point TEST_DATABASE_URL at one; `bash .ci/run` does both.", redact(url), err)
	}
	if c, err := pool.Acquire(ctx); err == nil {
		record(c.Conn(), "schema", name)
		c.Release()
	}
	t.Cleanup(func() {
		pool.Close()
		conn, err := connect(context.Background(), url)
		if err != nil {
			t.Errorf("drop test schema %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if err := dropSchema(conn, name); err != nil {
			t.Errorf("drop test schema %s: %v", name, err)
			return
		}
		forget(conn, name)
	})
	return &Schema{Name: name, Pool: pool, URL: url}
}

// dropSchema drops the test schema name with everything in it. The drop
// locks the schema's objects one after another, and a backend of a relay
// process the test has just stopped may still be finishing a statement
// that locks them in another order: PostgreSQL then aborts one of the two
// as a deadlock (SQLSTATE 40P01). The drop is tried again, a few times,
// once that statement has ended.
func dropSchema(conn *pgx.Conn, name string) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		_, err = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// busyWait is how long a test waits for a connection while the server has
// none left (several test suites at once on one server): the test is about
// the relay, not about the server's max_connections.
const busyWait = 2 * time.Minute

// tooManyClients reports whether err is the server refusing a connection
// because every slot is taken (SQLSTATE 53300).
func tooManyClients(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// ping checks that pool reaches the server: it fails within 10 seconds
// when none answers, and waits up to busyWait while the server is full.
func ping(ctx context.Context, pool *pgxpool.Pool) error {
	deadline := time.Now().Add(busyWait)
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pool.Ping(pingCtx)
		cancel()
		if err == nil || !tooManyClients(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// connect opens a connection to url, waiting up to busyWait while the
// server is full.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	deadline := time.Now().Add(busyWait)
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil || !tooManyClients(err) || time.Now().After(deadline) {
			return conn, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// NewPool returns another pool on the test database whose connections are
// named applicationName in pg_stat_activity, closed at cleanup. Tests use it
// to tell the relay's backends from their own.
func (s *Schema) NewPool(t testing.TB, applicationName string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.RuntimeParams["application_name"] = applicationName
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Conn returns a dedicated connection, closed at cleanup.
func (s *Schema) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := connect(context.Background(), s.URL)
	if err != nil {
		t.Fatalf("connect to test database: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Table returns the quoted, schema-qualified name of one of the relay's
// tables, for test queries.
func (s *Schema) Table(name string) string {
	return pgx.Identifier{s.Name, name}.Sanitize()
}

// Count returns the number of rows in one of the relay's tables.
func (s *Schema) Count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+s.Table(table)).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// CountWhere returns the number of rows of table for which the SQL
// condition cond holds.
func (s *Schema) CountWhere(t testing.TB, table, cond string) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+s.Table(table)+" WHERE "+cond).Scan(&n); err != nil {
		t.Fatalf("count %s where %s: %v", table, cond, err)
	}
	return n
}

// Exec runs sql (with %s replaced by the quoted schema) and fails t on error.
func (s *Schema) Exec(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	tag, err := s.Pool.Exec(context.Background(), strings.ReplaceAll(sql, "%s", pgx.Identifier{s.Name}.Sanitize()), args...)
	if err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
	return tag.RowsAffected()
}

// SetMode records mode as the schema's delivery mode and builds the
// indexes of that mode, as a relay that switches the mode does.
func (s *Schema) SetMode(t testing.TB, mode outbox.Mode) {
	t.Helper()
	s.Exec(t, `UPDATE %s.relay_mode SET mode = $1`, mode)
	s.Exec(t, `SELECT %s.messages_apply_mode()`)
}

// ExecAsRelay is Exec for fixtures that write the relay's own columns
// (attempts, leases, claim_seq), as a relay would have left them: it skips
// the insert guard that resets those columns for producers, with
// session_replication_role = replica (the test database's superuser may),
// and sets ids and generates missing idempotency keys as the guard would.
func (s *Schema) ExecAsRelay(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	s.asRelay(t, func(ctx context.Context, tx pgx.Tx) {
		tag, err := tx.Exec(ctx, strings.ReplaceAll(sql, "%s", pgx.Identifier{s.Name}.Sanitize()), args...)
		if err != nil {
			t.Fatalf("exec %q: %v", sql, err)
		}
		n = tag.RowsAffected()
	})
	return n
}

// ExecEachAsRelay runs sql once per element of args as ExecAsRelay does
// (triggers skipped), in one transaction, each in a savepoint: an
// execution PostgreSQL refuses (a domain's check, invalid UTF-8, a NUL in
// text) is rolled back alone. It returns which executions succeeded.
func (s *Schema) ExecEachAsRelay(t testing.TB, sql string, args [][]any) []bool {
	t.Helper()
	sql = strings.ReplaceAll(sql, "%s", pgx.Identifier{s.Name}.Sanitize())
	ok := make([]bool, len(args))
	s.asRelay(t, func(ctx context.Context, tx pgx.Tx) {
		for i, a := range args {
			if _, err := tx.Exec(ctx, "SAVEPOINT each"); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, sql, a...); err != nil {
				if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT each; RELEASE SAVEPOINT each"); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT each"); err != nil {
				t.Fatal(err)
			}
			ok[i] = true
		}
	})
	return ok
}

// asRelay runs write in a transaction that skips the insert guard
// (session_replication_role = replica) and does the guard's other work
// with column defaults for its duration (ids, missing idempotency keys),
// and commits it.
func (s *Schema) asRelay(t testing.TB, write func(ctx context.Context, tx pgx.Tx)) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
		t.Fatalf("skip triggers: %v", err)
	}
	messages := pgx.Identifier{s.Name, "messages"}.Sanitize()
	ids := pgx.Identifier{s.Name, "messages_id_seq"}.Sanitize()
	if _, err := tx.Exec(ctx, "ALTER TABLE "+messages+" ALTER COLUMN idempotency_key SET DEFAULT gen_random_uuid()::text, ALTER COLUMN id SET DEFAULT nextval('"+ids+"')"); err != nil {
		t.Fatalf("generate keys: %v", err)
	}
	write(ctx, tx)
	if _, err := tx.Exec(ctx, "ALTER TABLE "+messages+" ALTER COLUMN idempotency_key DROP DEFAULT, ALTER COLUMN id DROP DEFAULT"); err != nil {
		t.Fatalf("generate keys: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// schemaName makes a valid, unique schema name from a test name.
func schemaName(testName string) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(testName), "_")
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("t_%s_%s", strings.Trim(base, "_"), hex.EncodeToString(b[:]))
}

func redact(url string) string {
	if cfg, err := pgx.ParseConfig(url); err == nil && cfg.Password != "" {
		return strings.ReplaceAll(url, cfg.Password, "xxxxx")
	}
	return url
}

// Role is a database user created for one test: LOGIN, no other attribute,
// no privilege until the test grants some.
type Role struct {
	// Name is the role's name.
	Name string
	// URL is the test database's connection string with this role as the
	// user, and its password.
	URL string

	password string
}

// NewRole creates a uniquely named login role for t, with a random
// password (so that it connects whatever the test database's
// authentication), and drops it at cleanup together with everything it
// owns and every privilege granted to it. purpose ends its name.
func NewRole(t testing.TB, purpose string) *Role {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:]) + "_" + unsafeChars.ReplaceAllString(strings.ToLower(purpose), "_")
	password := hex.EncodeToString(b[:]) + "-pw"
	base := URL()
	conn, err := connect(ctx, base)
	if err != nil {
		t.Fatalf("no PostgreSQL reachable at %s to create role %s: %v (database tests never skip)", redact(base), name, err)
	}
	defer conn.Close(ctx)
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE ROLE "+quoted+" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '"+password+"'"); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	record(conn, "role", name)
	t.Cleanup(func() {
		conn, err := connect(context.Background(), base)
		if err != nil {
			t.Errorf("drop role %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		// Sessions a killed process left behind would hold objects.
		_, _ = conn.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usename = $1", name)
		if _, err := conn.Exec(context.Background(), "DROP OWNED BY "+quoted+" CASCADE"); err != nil {
			t.Errorf("drop what role %s owns: %v", name, err)
		}
		if _, err := conn.Exec(context.Background(), "DROP ROLE "+quoted); err != nil {
			t.Errorf("drop role %s: %v", name, err)
			return
		}
		forget(conn, name)
	})
	u, err := urlAs(base, name, password)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	return &Role{Name: name, URL: u, password: password}
}

// urlAs returns the connection string base with user and password
// replaced.
func urlAs(base, user, password string) (string, error) {
	if !strings.Contains(base, "://") {
		// key=value form: later keys win.
		return base + " user=" + user + " password=" + password, nil
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("not a valid URL: %w", err)
	}
	u.User = url.UserPassword(user, password)
	return u.String(), nil
}

// LeastPrivilege is a schema set up as docs/security.md's "Least
// privilege" says: a DBA created it for its own owner role (which has no privilege on
// the database), the owner migrates it and grants a producer, a relay and an
// operator role what migrations/least_privilege.sql grants them. The
// embedded Schema reaches it as the test database's superuser, for fixtures
// and checks.
type LeastPrivilege struct {
	*Schema
	// Owner owns the schema and everything in it.
	Owner *Role
	// Producer, Relay and Operator are the roles of least_privilege.sql.
	Producer, Relay, Operator *Role
}

// NewLeastPrivilege returns a schema migrated by its owner, with the grants
// applied; all of it is dropped at cleanup.
func NewLeastPrivilege(t testing.TB) *LeastPrivilege {
	t.Helper()
	lp := NewOwnedEmpty(t)
	conn := lp.ConnAs(t, lp.Owner)
	if _, err := migrations.Apply(context.Background(), conn, lp.Name); err != nil {
		t.Fatalf("the schema's owner migrates %s: %v", lp.Name, err)
	}
	lp.Grant(t)
	return lp
}

// NewOwnedEmpty is NewLeastPrivilege before the migrations and the grants:
// the roles and an empty schema owned by Owner.
func NewOwnedEmpty(t testing.TB) *LeastPrivilege {
	t.Helper()
	lp := &LeastPrivilege{Schema: NewEmpty(t), Owner: NewRole(t, "owner"),
		Producer: NewRole(t, "producer"), Relay: NewRole(t, "relay"), Operator: NewRole(t, "operator")}
	if _, err := lp.Pool.Exec(context.Background(),
		"CREATE SCHEMA "+pgx.Identifier{lp.Name}.Sanitize()+" AUTHORIZATION "+pgx.Identifier{lp.Owner.Name}.Sanitize()); err != nil {
		t.Fatalf("create schema %s for its owner: %v", lp.Name, err)
	}
	return lp
}

// Grant applies least_privilege.sql as the schema's owner.
func (lp *LeastPrivilege) Grant(t testing.TB) {
	t.Helper()
	grants, err := migrations.LeastPrivilege(lp.Name, migrations.Roles{Producer: lp.Producer.Name, Relay: lp.Relay.Name, Operator: lp.Operator.Name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lp.ConnAs(t, lp.Owner).Exec(context.Background(), grants); err != nil {
		t.Fatalf("the schema's owner applies least_privilege.sql: %v", err)
	}
}

// ConnAs returns a dedicated connection as role, closed at cleanup.
func (lp *LeastPrivilege) ConnAs(t testing.TB, role *Role) *pgx.Conn {
	t.Helper()
	conn, err := connect(context.Background(), role.URL)
	if err != nil {
		t.Fatalf("connect as %s: %v", role.Name, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// PoolAs returns a pool connecting as role, closed at cleanup.
func (lp *LeastPrivilege) PoolAs(t testing.TB, role *Role) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(role.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewDatabase creates an empty database of its own for t on the test
// server, dropped at cleanup (with the sessions still in it), and returns
// its connection string. Tests of what is database-wide (the xmin horizon,
// which every session of a database holds back) take one, so that the
// other tests on the server do not move what they measure.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	base := URL()
	name := schemaName(t.Name())
	conn, err := connect(ctx, base)
	if err != nil {
		t.Fatalf("no PostgreSQL reachable at %s to create a database: %v (database tests never skip)", redact(base), err)
	}
	defer conn.Close(ctx)
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+quoted); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		conn, err := connect(context.Background(), base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+quoted+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	if !strings.Contains(base, "://") {
		return base + " dbname=" + name
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL is not a valid URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// NewInOwnDatabase creates a database of its own for t (NewDatabase) and
// migrates the schema outbox in it, the relay's default: for tests of what
// is database-wide, such as the xmin horizon. Its pool closes at cleanup,
// before the database is dropped.
func NewInOwnDatabase(t testing.TB) *Schema {
	t.Helper()
	s := &Schema{Name: "outbox", URL: NewDatabase(t)}
	s.Pool = s.NewPool(t, s.Name)
	if _, err := migrations.Apply(context.Background(), s.Conn(t), s.Name); err != nil {
		t.Fatalf("migrate schema %s in a database of its own: %v", s.Name, err)
	}
	return s
}

// WithUser returns the connection string u with role's user and password.
func (r *Role) WithUser(u string) string {
	s, err := urlAs(u, r.Name, r.password)
	if err != nil {
		panic(fmt.Sprintf("dbtest: %v", err))
	}
	return s
}
