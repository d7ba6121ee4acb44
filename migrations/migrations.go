// Package migrations holds the relay's versioned SQL and applies it with tern.
//
// Every file in sql/ is a tern migration template rendered with the schema
// name as {{.schema}} (already quoted). Apply takes a per-schema advisory
// lock before creating the schema and running tern, so several replicas that
// start together apply each migration exactly once; tern records the version
// in <schema>.schema_version.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// DefaultSchema is the schema the relay's tables live in unless RELAY_SCHEMA
// says otherwise.
const DefaultSchema = outbox.DefaultSchema

// versionTable is tern's bookkeeping table, created inside the schema.
const versionTable = "schema_version"

//go:embed sql/*.sql
var files embed.FS

//go:embed least_privilege.sql
var leastPrivilege string

// ValidateSchema reports whether name can be used as the relay's schema;
// see outbox.ValidateSchema.
func ValidateSchema(name string) error { return outbox.ValidateSchema(name) }

// Quote returns the schema name quoted for use in SQL; see
// outbox.QuoteSchema.
func Quote(schema string) string { return outbox.QuoteSchema(schema) }

// Latest is the version the embedded migrations bring a schema to.
func Latest() int32 {
	m, err := load(context.Background(), nil, DefaultSchema)
	if err != nil {
		panic(err) // The embedded files are part of the binary; tests load them.
	}
	return int32(len(m.Migrations))
}

// Apply creates schema when missing and applies every pending migration. It
// holds an advisory lock for the schema meanwhile, so concurrent callers wait
// for each other and then find nothing left to do. It returns the number of
// migrations applied.
func Apply(ctx context.Context, conn *pgx.Conn, schema string) (int, error) {
	if err := ValidateSchema(schema); err != nil {
		return 0, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", lockName(schema)); err != nil {
		return 0, fmt.Errorf("lock schema %s for migration: %w", schema, err)
	}
	defer func() {
		// A failed unlock leaves the lock to the end of the session; the
		// caller closes the connection.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext($1))", lockName(schema))
	}()

	// CREATE SCHEMA, even IF NOT EXISTS, needs CREATE on the database: an
	// owner given the schema by a DBA (CREATE SCHEMA … AUTHORIZATION) may
	// not have it, so the schema is created only when it is missing.
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look up schema %s: %w", schema, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+Quote(schema)); err != nil {
			return 0, fmt.Errorf("create schema %s: %w", schema, err)
		}
	}
	m, err := load(ctx, conn, schema)
	if err != nil {
		return 0, err
	}
	before, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if before > int32(len(m.Migrations)) {
		return 0, fmt.Errorf("schema %s is at version %d, newer than this binary knows (%d): upgrade outbox-relay", schema, before, len(m.Migrations))
	}
	if err := m.Migrate(ctx); err != nil {
		return 0, fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	return len(m.Migrations) - int(before), nil
}

// CurrentVersion returns the version schema is at, or 0 when the relay's
// tables were never created there.
func CurrentVersion(ctx context.Context, conn *pgx.Conn, schema string) (int32, error) {
	if err := ValidateSchema(schema); err != nil {
		return 0, err
	}
	var exists bool
	err := conn.QueryRow(ctx,
		"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2)",
		schema, versionTable).Scan(&exists)
	if err != nil {
		return 0, fmt.Errorf("look up %s.%s: %w", schema, versionTable, err)
	}
	if !exists {
		return 0, nil
	}
	var v int32
	if err := conn.QueryRow(ctx, "SELECT version FROM "+Quote(schema)+"."+versionTable).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// Check reports whether schema is at the version this binary's statements
// are written for, with an error that says what to do when it is not: the
// relay's tables are missing, behind or newer than this binary.
func Check(ctx context.Context, conn *pgx.Conn, schema string) error {
	v, err := CurrentVersion(ctx, conn, schema)
	if err != nil {
		return err
	}
	switch want := Latest(); {
	case v == 0:
		return fmt.Errorf("schema %s holds no outbox-relay tables: check RELAY_SCHEMA and DATABASE_URL, or create them with `outbox-relay migrate` (or apply `outbox-relay migrate --print` with your migration tool)", schema)
	case v < want:
		return fmt.Errorf("schema %s is at version %d, this binary needs %d: run `outbox-relay migrate` (or a relay with RELAY_MIGRATE=true), or apply `outbox-relay migrate --print` with your migration tool", schema, v, want)
	case v > want:
		return fmt.Errorf("schema %s is at version %d, newer than this binary knows (%d): use a newer outbox-relay", schema, v, want)
	}
	return nil
}

// Render returns the SQL that Apply would run on an empty database, as one
// script for teams that apply schema changes with their own tool. The script
// also records the version, so a relay started afterwards (with or without
// RELAY_MIGRATE) finds nothing to do.
func Render(schema string) (string, error) {
	if err := ValidateSchema(schema); err != nil {
		return "", err
	}
	m, err := load(context.Background(), nil, schema)
	if err != nil {
		return "", err
	}
	q := Quote(schema)
	var b strings.Builder
	fmt.Fprintf(&b, "-- outbox-relay schema %s, version %d.\n", schema, len(m.Migrations))
	b.WriteString("-- Generated by `outbox-relay migrate --print`; apply it in one transaction.\n\n")
	b.WriteString("BEGIN;\n\n")
	// As in Apply: created only when missing, so that an owner given the
	// schema, without CREATE on the database, can apply the script.
	fmt.Fprintf(&b, "DO $$\nBEGIN\n    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = '%s') THEN\n        CREATE SCHEMA %s;\n    END IF;\nEND\n$$;\n\n", schema, q)
	for _, mig := range m.Migrations {
		fmt.Fprintf(&b, "-- %s\n%s\n\n", mig.Name, strings.TrimSpace(mig.UpSQL))
	}
	fmt.Fprintf(&b, "-- Version bookkeeping (tern's table): `outbox-relay migrate` reads it.\n")
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s.%s (version int4 NOT NULL);\n", q, versionTable)
	fmt.Fprintf(&b, "DELETE FROM %s.%s;\n", q, versionTable)
	fmt.Fprintf(&b, "INSERT INTO %s.%s (version) VALUES (%d);\n\n", q, versionTable, len(m.Migrations))
	b.WriteString("COMMIT;\n")
	return b.String(), nil
}

// Roles names the roles that least_privilege.sql grants to.
type Roles struct {
	// Producer inserts rows into messages, nothing else.
	Producer string
	// Relay runs the relay with RELAY_MIGRATE=false.
	Relay string
	// Operator runs status, dead, replay and cancel.
	Operator string
}

// LeastPrivilegeScript returns migrations/least_privilege.sql as it is:
// a psql script whose schema and roles are the psql variables schema,
// producer, relay and operator.
func LeastPrivilegeScript() string { return leastPrivilege }

// LeastPrivilege returns the grants of least_privilege.sql for schema and
// roles as plain SQL, without psql's meta-commands, for any client to run
// (as the schema's owner, once its migrations are applied).
func LeastPrivilege(schema string, roles Roles) (string, error) {
	if err := ValidateSchema(schema); err != nil {
		return "", err
	}
	vars := map[string]string{"schema": schema, "producer": roles.Producer, "relay": roles.Relay, "operator": roles.Operator}
	var b strings.Builder
	for _, line := range strings.SplitAfter(leastPrivilege, "\n") {
		if strings.HasPrefix(line, `\`) {
			continue // psql's meta-commands: the variables' defaults
		}
		b.WriteString(line)
	}
	sql := b.String()
	for name, value := range vars {
		if value == "" {
			return "", fmt.Errorf("least-privilege grants: no name for the %s role", name)
		}
		sql = strings.ReplaceAll(sql, `:"`+name+`"`, pgx.Identifier{value}.Sanitize())
	}
	if i := strings.Index(sql, `:"`); i >= 0 {
		return "", fmt.Errorf("least-privilege grants: unknown psql variable at %q", sql[i:min(i+20, len(sql))])
	}
	return sql, nil
}

// load builds a tern migrator for schema over the embedded files. A nil conn
// gives a migrator that can only render.
func load(ctx context.Context, conn *pgx.Conn, schema string) (*migrate.Migrator, error) {
	m, err := migrate.NewMigrator(ctx, conn, Quote(schema)+"."+versionTable)
	if err != nil {
		return nil, fmt.Errorf("prepare migrator: %w", err)
	}
	m.Data["schema"] = Quote(schema)
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		return nil, err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return m, nil
}

func lockName(schema string) string { return "outbox-relay:migrate:" + schema }
