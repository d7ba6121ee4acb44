package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// The operator's commands with several outboxes configured: RELAY_SCHEMAS,
// RELAY_SCHEMA_MATCH and RELAY_TENANTS_FILE, and --schema and --tenant.

// closedDatabaseURL is a database nothing answers at.
const closedDatabaseURL = "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"

// runEnv runs the binary's run with args and environ and returns the exit
// code, stdout and stderr.
func runEnv(t *testing.T, environ []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, environ, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// overviewLine returns the fields of the overview's line whose first
// fields are first, or fails t.
func overviewLine(t *testing.T, stdout string, first ...string) []string {
	t.Helper()
	for line := range strings.Lines(stdout) {
		f := strings.Fields(line)
		if len(f) >= len(first) && slices.Equal(f[:len(first)], first) {
			return f
		}
	}
	t.Fatalf("status printed no line for %v:\n%s", first, stdout)
	return nil
}

// checkCounts compares an overview line's MODE, DUE, IN BACKOFF, DEAD
// LETTERS and RELAYS ALIVE (after skip fields) with want, and its OLDEST
// DUE with "-" when nothing is due.
func checkCounts(t *testing.T, line []string, skip int, mode, due, backoff, dead, alive string) {
	t.Helper()
	if len(line) != skip+6 {
		t.Errorf("overview line %q: want %d fields", line, skip+6)
		return
	}
	got := line[skip:]
	if got[0] != mode || got[1] != due || got[3] != backoff || got[4] != dead || got[5] != alive || (due == "0") != (got[2] == "-") {
		t.Errorf("overview line %q: want mode %s, due %s, backoff %s, dead letters %s, relays alive %s", line, mode, due, backoff, dead, alive)
	}
}

// twoOutboxes returns a schema with two due rows, two dead letters and a
// relay alive (adminFixture), and an ordered one with a row in backoff.
func twoOutboxes(t *testing.T) (a, b *dbtest.Schema) {
	t.Helper()
	a = adminFixture(t)
	a.Exec(t, `INSERT INTO %s.relays (id, version, mode) VALUES ('relay-a', 'v1', 'unordered')`)
	b = dbtest.New(t)
	b.SetMode(t, "ordered")
	b.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, attempts, available_at, last_error) VALUES ('t', 'x', 3, now() + interval '1 hour', 'timeout')`)
	b.Exec(t, `INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts) VALUES (1, 'orders.created', 'x', 'b1', now(), 1)`)
	return a, b
}

func TestManyOutboxes_StatusOverviewOfRelaySchemas(t *testing.T) {
	t.Parallel()
	a, b := twoOutboxes(t)
	env := []string{"DATABASE_URL=" + a.URL, "RELAY_SCHEMAS=" + a.Name + "," + b.Name}

	code, stdout, stderr := runEnv(t, env, "status")
	if code != exitOK {
		t.Fatalf("status: exit %d, stderr %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, "SCHEMA ") || strings.Contains(stdout, "TENANT") {
		t.Errorf("status overview without tenants: want a SCHEMA column first, no TENANT:\n%s", stdout)
	}
	checkCounts(t, overviewLine(t, stdout, a.Name), 1, "unordered", "2", "0", "2", "1")
	checkCounts(t, overviewLine(t, stdout, b.Name), 1, "ordered", "0", "1", "0", "0")

	code, stdout, _ = runEnv(t, env, "status", "--json")
	var lines []outboxStatus
	if err := json.Unmarshal([]byte(stdout), &lines); code != exitOK || err != nil {
		t.Fatalf("status --json: exit %d, %v, printed %q", code, err, stdout)
	}
	if len(lines) != 2 || lines[0].Schema != a.Name || lines[1].Schema != b.Name || lines[0].Status == nil || lines[0].Status.DeadLetters.Total != 2 ||
		lines[1].Status == nil || lines[1].Status.Total().Backoff != 1 {
		t.Errorf("status --json overview: %+v", lines)
	}

	code, stdout, stderr = runEnv(t, env, "status", "--schema", b.Name)
	if code != exitOK || !strings.HasPrefix(stdout, "Schema "+b.Name+" at ") || !strings.Contains(stdout, "IN BACKOFF BY LAST ERROR") {
		t.Errorf("status --schema %s: exit %d, stderr %s, stdout:\n%s", b.Name, code, stderr, stdout)
	}
	code, _, stderr = runEnv(t, env, "status", "--schema", "Not-A-Schema")
	if code != exitUsage || !strings.Contains(stderr, `--schema "Not-A-Schema"`) {
		t.Errorf("status --schema Not-A-Schema: exit %d, stderr %s; want %d naming the flag", code, stderr, exitUsage)
	}
}

func TestManyOutboxes_StatusOverviewOfAPattern(t *testing.T) {
	t.Parallel()
	a, b := twoOutboxes(t)
	// a's name, its last two characters any: a matches, b (another random
	// suffix) does not.
	pattern := strings.ReplaceAll(a.Name[:len(a.Name)-2], "_", `\_`) + "__"
	env := []string{"DATABASE_URL=" + a.URL, "RELAY_SCHEMA_MATCH=" + pattern}

	code, stdout, stderr := runEnv(t, env, "status")
	if code != exitOK {
		t.Fatalf("status: exit %d, stderr %s", code, stderr)
	}
	checkCounts(t, overviewLine(t, stdout, a.Name), 1, "unordered", "2", "0", "2", "1")
	if strings.Contains(stdout, b.Name) {
		t.Errorf("status with RELAY_SCHEMA_MATCH=%s lists %s, which it does not match:\n%s", pattern, b.Name, stdout)
	}

	// A pattern that matches nothing says so, and is no failure.
	code, stdout, stderr = runEnv(t, []string{"DATABASE_URL=" + a.URL, "RELAY_SCHEMA_MATCH=no\\_such\\_%"}, "status")
	if code != exitOK || !strings.Contains(stdout, "no schema matches yet") {
		t.Errorf("status with a pattern that matches nothing: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
}

// tenantsWithOneDown returns the environment of a RELAY_TENANTS_FILE with
// tenants acme (a's schema), beta (b's) and down (a database that refuses
// connections).
func tenantsWithOneDown(t *testing.T, a, b *dbtest.Schema) []string {
	t.Helper()
	file := writeTenants(t, `tenants:
  - name: acme
    database_url: ${TEST_DB}
    schemas: [`+a.Name+`]
  - name: beta
    database_url: ${TEST_DB}
    schemas: [`+b.Name+`]
  - name: down
    database_url: `+closedDatabaseURL+`
    schemas: [outbox]
`)
	return []string{"RELAY_TENANTS_FILE=" + file, "TEST_DB=" + a.URL}
}

func TestManyOutboxes_StatusOverviewOfTenants(t *testing.T) {
	t.Parallel()
	a, b := twoOutboxes(t)
	env := tenantsWithOneDown(t, a, b)

	code, stdout, stderr := runEnv(t, env, "status")
	if code != exitFailure || !strings.Contains(stderr, "1 of 3 outboxes could not be read") {
		t.Errorf("status with a tenant down: exit %d, stderr %s; want %d saying one outbox could not be read", code, stderr, exitFailure)
	}
	if !strings.HasPrefix(stdout, "TENANT ") {
		t.Errorf("status overview of tenants: want a TENANT column first:\n%s", stdout)
	}
	checkCounts(t, overviewLine(t, stdout, "acme", a.Name), 2, "unordered", "2", "0", "2", "1")
	checkCounts(t, overviewLine(t, stdout, "beta", b.Name), 2, "ordered", "0", "1", "0", "0")
	down := strings.Join(overviewLine(t, stdout, "down", "outbox"), " ")
	if !strings.Contains(down, "cannot read it: connect to database") {
		t.Errorf("the line of the tenant down does not say why: %q", down)
	}

	// --tenant alone picks a tenant of one outbox: its detailed report.
	code, stdout, stderr = runEnv(t, env, "status", "--tenant", "beta")
	if code != exitOK || !strings.HasPrefix(stdout, "Schema "+b.Name+" of tenant beta at ") {
		t.Errorf("status --tenant beta: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
}

func TestManyOutboxes_CommandsOnOneOutboxRefuseWithoutSchema(t *testing.T) {
	t.Parallel()
	a, b := twoOutboxes(t)
	schemas := []string{"DATABASE_URL=" + a.URL, "RELAY_SCHEMAS=" + a.Name + "," + b.Name}
	file := writeTenants(t, `tenants:
  - name: acme
    database_url: `+a.URL+`
    schemas: [`+a.Name+`]
  - name: beta
    database_url: `+b.URL+`
    schema_match: `+strings.ReplaceAll(b.Name, "_", `\_`)+`
`)
	tenants := []string{"RELAY_TENANTS_FILE=" + file}
	for _, tc := range []struct {
		env  []string
		want []string
	}{
		{schemas, []string{"RELAY_SCHEMAS names several outboxes", "--schema", "\n  " + a.Name + "\n", "\n  " + b.Name}},
		{tenants, []string{"RELAY_TENANTS_FILE names several outboxes", "--schema (and --tenant)", "\n  acme/" + a.Name + "\n", "\n  beta/" + b.Name}},
	} {
		for _, args := range [][]string{{"dead", "list"}, {"dead", "retry", "--all"}, {"dead", "purge", "--all"}, {"replay", "--all"}, {"cancel", "--topic", "orders.%"}} {
			code, stdout, stderr := runEnv(t, tc.env, args...)
			if code != exitUsage || stdout != "" {
				t.Errorf("%v with %s: exit %d, stdout %q; want %d", args, tc.want[0], code, stdout, exitUsage)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("%v with %s: stderr lacks %q:\n%s", args, tc.want[0], w, stderr)
				}
			}
		}
	}
	if a.Count(t, "dead_letters") != 2 || a.Count(t, "messages_all") != 2 || b.Count(t, "messages_all") != 1 || b.Count(t, "archive") != 1 {
		t.Fatal("a refused command changed rows")
	}

	// --schema picks one; the other's rows stay as they are.
	code, stdout, stderr := runEnv(t, schemas, "dead", "list", "--schema", a.Name)
	if code != exitOK || !strings.HasSuffix(stdout, "2 dead letters\n") {
		t.Errorf("dead list --schema %s: exit %d, stderr %s, stdout:\n%s", a.Name, code, stderr, stdout)
	}
	code, stdout, stderr = runEnv(t, schemas, "dead", "list", "--schema", b.Name)
	if code != exitOK || stdout != "no dead letters match\n" {
		t.Errorf("dead list --schema %s: exit %d, stderr %s, stdout %q", b.Name, code, stderr, stdout)
	}
	code, stdout, stderr = runEnv(t, tenants, "replay", "--all", "--tenant", "beta", "--schema", b.Name)
	if code != exitOK || !strings.HasPrefix(stdout, "replayed 1 event") || b.Count(t, "messages_all") != 2 || a.Count(t, "messages_all") != 2 {
		t.Errorf("replay --tenant beta --schema %s: exit %d, stderr %s, stdout %q; %d rows in its messages (want 2), %d in the other's (want 2)",
			b.Name, code, stderr, stdout, b.Count(t, "messages_all"), a.Count(t, "messages_all"))
	}
	// Only acme lists a's schema: --tenant may be left out.
	code, stdout, stderr = runEnv(t, tenants, "dead", "purge", "--all", "--schema", a.Name)
	if code != exitOK || stdout != "purged 2 dead letters\n" || a.Count(t, "dead_letters") != 0 {
		t.Errorf("dead purge --all --schema %s: exit %d, stderr %s, stdout %q", a.Name, code, stderr, stdout)
	}
	// No tenant lists b's: which database is it in?
	code, _, stderr = runEnv(t, tenants, "dead", "list", "--schema", b.Name)
	if code != exitUsage || !strings.Contains(stderr, "--tenant") || !strings.Contains(stderr, "acme, beta") {
		t.Errorf("dead list --schema %s without --tenant: exit %d, stderr %s; want %d asking for --tenant", b.Name, code, stderr, exitUsage)
	}
}

func TestManyOutboxes_TenantFlag(t *testing.T) {
	t.Parallel()
	a := adminFixture(t)
	file := writeTenants(t, `tenants:
  - name: acme
    database_url: `+a.URL+`
    schemas: [`+a.Name+`]
  - name: beta
    database_url: `+closedDatabaseURL+`
    schemas: [outbox]
`)
	for _, args := range [][]string{{"status"}, {"dead", "list"}, {"replay", "--all"}, {"cancel", "--key", "k"}, {"migrate"}} {
		code, _, stderr := runEnv(t, []string{"RELAY_TENANTS_FILE=" + file}, append(args, "--tenant", "globex")...)
		if code != exitUsage || !strings.Contains(stderr, `--tenant "globex"`) || !strings.Contains(stderr, "acme, beta") {
			t.Errorf("%v --tenant globex: exit %d, stderr %s; want %d listing the tenants", args, code, stderr, exitUsage)
		}
		code, _, stderr = runEnv(t, []string{"DATABASE_URL=" + a.URL, "RELAY_SCHEMA=" + a.Name}, append(args, "--tenant", "acme")...)
		if code != exitUsage || !strings.Contains(stderr, "RELAY_TENANTS_FILE") {
			t.Errorf("%v --tenant without a tenants file: exit %d, stderr %s; want %d naming RELAY_TENANTS_FILE", args, code, stderr, exitUsage)
		}
	}
	code, stdout, stderr := runEnv(t, []string{"RELAY_TENANTS_FILE=" + file}, "dead", "list", "--tenant", "acme")
	if code != exitOK || !strings.HasSuffix(stdout, "2 dead letters\n") {
		t.Errorf("dead list --tenant acme: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
}

// schemaExists reports whether the test database has schema.
func schemaExists(t *testing.T, db *dbtest.Schema, schema string) bool {
	t.Helper()
	var ok bool
	if err := db.Pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestManyOutboxes_Migrate(t *testing.T) {
	t.Parallel()
	x, y, z := dbtest.NewEmpty(t), dbtest.NewEmpty(t), dbtest.NewEmpty(t)
	env := []string{"DATABASE_URL=" + x.URL, "RELAY_SCHEMAS=" + x.Name + "," + y.Name}

	// --schema: that one alone, even one that is not listed.
	code, stdout, stderr := runEnv(t, env, "migrate", "--schema", z.Name)
	if code != exitOK || !strings.HasPrefix(stdout, "schema "+z.Name+" migrated to version ") || !schemaExists(t, x, z.Name) ||
		schemaExists(t, x, x.Name) || schemaExists(t, x, y.Name) {
		t.Errorf("migrate --schema %s: exit %d, stderr %s, stdout %q", z.Name, code, stderr, stdout)
	}

	// Every listed schema, one line each.
	code, stdout, stderr = runEnv(t, env, "migrate")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != exitOK || len(lines) != 2 || !strings.HasPrefix(lines[0], "schema "+x.Name+" migrated") || !strings.HasPrefix(lines[1], "schema "+y.Name+" migrated") {
		t.Errorf("migrate with RELAY_SCHEMAS: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
	if !schemaExists(t, x, x.Name) || !schemaExists(t, x, y.Name) {
		t.Error("migrate with RELAY_SCHEMAS did not create both schemas")
	}

	// A pattern's schemas are migrated too, and a tenant down fails the
	// command after the others are done.
	file := writeTenants(t, `tenants:
  - name: acme
    database_url: `+x.URL+`
    schemas: [`+x.Name+`]
    schema_match: `+strings.ReplaceAll(z.Name, "_", `\_`)+`
  - name: down
    database_url: `+closedDatabaseURL+`
    schemas: [outbox]
`)
	code, stdout, stderr = runEnv(t, []string{"RELAY_TENANTS_FILE=" + file}, "migrate")
	for _, want := range []string{"schema " + x.Name + " of tenant acme is up to date", "schema " + z.Name + " of tenant acme is up to date"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("migrate with a tenants file: stdout lacks %q:\n%s", want, stdout)
		}
	}
	if code != exitFailure || !strings.Contains(stderr, "down/outbox: connect to database") || !strings.Contains(stderr, "1 of 3 not migrated") {
		t.Errorf("migrate with a tenant down: exit %d, stderr %s", code, stderr)
	}

	// --print: --schema's SQL, or refused when several are configured.
	code, stdout, _ = runEnv(t, env, "migrate", "--print", "--schema", "events_out")
	if code != exitOK || !strings.Contains(stdout, `CREATE TABLE "events_out".messages`) {
		t.Errorf("migrate --print --schema events_out: exit %d, stdout starts %.200q", code, stdout)
	}
	code, _, stderr = runEnv(t, env, "migrate", "--print")
	if code != exitUsage || !strings.Contains(stderr, "--schema") {
		t.Errorf("migrate --print with RELAY_SCHEMAS: exit %d, stderr %s; want %d asking for --schema", code, stderr, exitUsage)
	}
}
