package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// TestProcess_SchemaOwners_MatchedSchemaOfAnotherOwnerIsNotServed: a role
// that may create schemas in the database (as a schema-per-tenant
// application's must) creates and migrates a schema that matches
// RELAY_SCHEMA_MATCH, with a trigger on its messages table that copies
// another tenant's delivered payloads into a table of its own. A relay
// with the default trusted owners (the role it connects as) does not serve
// it: it warns once, naming the schema and its owner, the schema's rows
// stay where they are and the trigger never runs as the relay's role,
// while the relay's own schema is served. Before, the relay served it, and
// the trigger read the other tenant's payloads as the relay's role. With
// RELAY_SCHEMA_OWNERS naming the role (once the trigger is gone), a relay
// serves that schema and no longer the one its own role owns; a tenants
// file's schema_owners, with a ${VAR}, does the same. The operator's
// commands list what the relay serves.
func TestProcess_SchemaOwners_MatchedSchemaOfAnotherOwnerIsNotServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "S", "s.>")
	var relayRole, database string
	if err := base.Pool.QueryRow(ctx, "SELECT current_user, current_database()").Scan(&relayRole, &database); err != nil {
		t.Fatal(err)
	}
	mine := siblingSchema(t, base, "tmine", true)
	relaytest.InsertRows(t, mine, 20, "s.mine")

	// The tenant's role creates, migrates and arms its schema.
	tenant := dbtest.NewRole(t, "tenant")
	base.Exec(t, "GRANT CREATE ON DATABASE "+pgx.Identifier{database}.Sanitize()+" TO "+pgx.Identifier{tenant.Name}.Sanitize())
	theirs := &dbtest.Schema{Name: base.Name + "_ttheirs", Pool: base.Pool, URL: base.URL}
	t.Cleanup(func() { // after the relays stop, before the role is dropped
		_, _ = base.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{theirs.Name}.Sanitize()+" CASCADE")
	})
	conn, err := pgx.Connect(ctx, tenant.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{theirs.Name}.Sanitize()); err != nil {
		t.Fatalf("the tenant's role creates a schema: %v", err)
	}
	if _, err := migrations.Apply(ctx, conn, theirs.Name); err != nil {
		t.Fatalf("the tenant's role migrates its schema: %v", err)
	}
	q := pgx.Identifier{theirs.Name}.Sanitize()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`
CREATE TABLE %[1]s.loot (payload bytea);
CREATE FUNCTION %[1]s.steal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO %[1]s.loot SELECT payload FROM %[2]s;
    RETURN NULL;
END $$;
CREATE TRIGGER steal AFTER UPDATE OR DELETE ON %[1]s.messages FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.steal();`,
		q, mine.Table("archive"))); err != nil {
		t.Fatalf("the tenant's role adds its trigger: %v", err)
	}

	pattern := likeEscape(base.Name+"_t") + "%"
	env := []string{"DATABASE_URL=" + base.URL, "RELAY_SCHEMA_MATCH=" + pattern, "RELAY_DISCOVER_INTERVAL=1s", "NATS_URL=" + srv.URL()}
	defaults := startProcess(t, env...)
	waitLogAll(t, defaults, `"schema matches but is not served: it or its messages table is owned by a role that is not a trusted owner`,
		schemaAttr(theirs.Name), `"schema_owner":"`+tenant.Name+`"`, `"table_owner":"`+tenant.Name+`"`, `"trusted_owners":"`+relayRole+`"`, "RELAY_SCHEMA_OWNERS")
	relaytest.WaitDrained(t, mine, relaytest.Budget(20))
	relaytest.AssertStreamMatchesArchive(t, mine, srv, "S", 20)
	// Rows for the trigger to fire on, once there are payloads to copy;
	// then a row of the relay's own schema goes through.
	relaytest.InsertRows(t, theirs, 10, "s.theirs")
	relaytest.InsertRows(t, mine, 1, "s.mine")
	relaytest.WaitDrained(t, mine, relaytest.Budget(1))
	if got := theirs.Count(t, "messages_all"); got != 10 {
		t.Errorf("the schema of another owner has %d rows left of 10: the relay served it", got)
	}
	if got := theirs.Count(t, "loot"); got != 0 {
		t.Errorf("the other owner's trigger ran as the relay's role and copied %d payloads of schema %s", got, mine.Name)
	}
	if logHas(defaults, `"schema found: serving its outbox"`, schemaAttr(theirs.Name)) {
		t.Errorf("the relay serves schema %s, owned by %s", theirs.Name, tenant.Name)
	}

	// The operator's commands list the outboxes the relay serves.
	code, stdout, stderr := runBinary(t, []string{"DATABASE_URL=" + base.URL, "RELAY_SCHEMA_MATCH=" + pattern}, "status")
	if code != 0 || !strings.Contains(stdout, mine.Name) || strings.Contains(stdout, theirs.Name) {
		t.Errorf("status with RELAY_SCHEMA_MATCH=%s: exit %d, stderr %s; want %s listed and not %s:\n%s", pattern, code, stderr, mine.Name, theirs.Name, stdout)
	}

	// Named owners: the tenant's schema is served (its trigger dropped
	// first), the one owned by the relay's role is not.
	if _, err := conn.Exec(ctx, "DROP TRIGGER steal ON "+theirs.Table("messages")); err != nil {
		t.Fatal(err)
	}
	named := startProcess(t, append(env, "RELAY_SCHEMA_OWNERS="+tenant.Name)...)
	waitLogAll(t, named, `"schema found: serving its outbox"`, schemaAttr(theirs.Name))
	relaytest.WaitDrained(t, theirs, relaytest.Budget(10))
	waitLogAll(t, named, `"schema matches but is not served`, schemaAttr(mine.Name), `"schema_owner":"`+relayRole+`"`, `"trusted_owners":"`+tenant.Name+`"`)
	if logHas(named, `"schema found: serving its outbox"`, schemaAttr(mine.Name)) {
		t.Errorf("with RELAY_SCHEMA_OWNERS=%s the relay serves schema %s, owned by %s", tenant.Name, mine.Name, relayRole)
	}

	// The tenants file's schema_owners, through a ${VAR}.
	file := writeTenants(t, "tenants:\n  - name: acme\n    database_url: ${ACME_URL}\n    schema_match: '"+pattern+"'\n    schema_owners:\n      - ${ACME_OWNER}\n")
	fromFile := startProcess(t, "RELAY_TENANTS_FILE="+file, "ACME_URL="+base.URL, "ACME_OWNER="+tenant.Name, "RELAY_DISCOVER_INTERVAL=1s", "NATS_URL="+srv.URL())
	waitLogAll(t, fromFile, `"schema matches but is not served`, `"tenant":"acme"`, schemaAttr(mine.Name), `"trusted_owners":"`+tenant.Name+`"`)
	waitLogAll(t, fromFile, `"schema found: serving its outbox"`, schemaAttr(theirs.Name))

	// Said once, however many searches since, and never served: no series
	// of it on /metrics.
	if got := len(defaults.logLines("WARN", schemaAttr(theirs.Name))); got != 1 {
		t.Errorf("the relay warned %d times about schema %s, want once", got, theirs.Name)
	}
	if strings.Contains(defaults.metrics(), `schema="`+theirs.Name+`"`) {
		t.Errorf("/metrics of the relay with the default owners has series of schema %s", theirs.Name)
	}
}
