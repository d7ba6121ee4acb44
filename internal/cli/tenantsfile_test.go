package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// writeTenants writes body as a tenants file and returns its path.
func writeTenants(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTenantsFile_ReadsExpandsAndChecks(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "globex-url")
	if err := os.WriteFile(secret, []byte("postgres://relay:pw@globex.internal/app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeTenants(t, `tenants:
  - name: acme
    database_url: postgres://relay:${ACME_PASSWORD}@acme.internal/app?application_name=a$$b
    schemas: [orders, billing]
  - name: globex
    database_url_file: ${SECRETS}/globex-url
    schema_match: tenant\_%
    schema_owners:
      - ${GLOBEX_OWNER}
      - globex_admin
    mode: ordered
`)
	got, err := readTenantsFile(path, []string{"ACME_PASSWORD=s3cret", "SECRETS=" + filepath.Dir(secret), "GLOBEX_OWNER=globex_app"})
	if err != nil {
		t.Fatal(err)
	}
	want := []tenant{
		{Name: "acme", DatabaseURL: "postgres://relay:s3cret@acme.internal/app?application_name=a$b", Schemas: []string{"orders", "billing"}},
		{Name: "globex", DatabaseURL: "postgres://relay:pw@globex.internal/app", SchemaMatch: `tenant\_%`,
			SchemaOwners: []string{"globex_app", "globex_admin"}, Mode: outbox.ModeOrdered},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// Every refusal names RELAY_TENANTS_FILE, the tenant and what is wrong,
// and never shows a database URL's password.
func TestTenantsFile_RefusalsNameTheTenantAndHideTheURL(t *testing.T) {
	t.Parallel()
	const url = "postgres://relay:hunter2@db.internal/app"
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key", "tenants:\n  - name: a\n    database_url: " + url + "\n    schema: [x]\n", "field schema not found"},
		{"unset variable", "tenants:\n  - name: a\n    database_url: ${NOPE}\n    schemas: [x]\n", `tenant "a": database_url: ${NOPE} is not set`},
		{"lone dollar", "tenants:\n  - name: a\n    database_url: postgres://relay:pa$s@db/app\n    schemas: [x]\n", `tenant "a": database_url: a $ that is neither`},
		{"duplicate tenant", "tenants:\n  - name: a\n    database_url: " + url + "\n    schemas: [x]\n  - name: a\n    database_url: " + url + "\n    schemas: [y]\n", `tenant "a" is listed twice`},
		{"same schema twice in a database", "tenants:\n  - name: a\n    database_url: " + url + "\n    schemas: [x]\n  - name: b\n    database_url: " + url + "\n    schemas: [x]\n", `tenants "a" and "b" both list schema x`},
		{"bad schema", "tenants:\n  - name: a\n    database_url: " + url + "\n    schemas: [Orders]\n", `schemas: "Orders" is not a valid schema name`},
		{"bad name", "tenants:\n  - name: Acme Corp\n    database_url: " + url + "\n    schemas: [x]\n", `tenant 1: name "Acme Corp"`},
		{"no database", "tenants:\n  - name: a\n    schemas: [x]\n", "no database_url or database_url_file"},
		{"both databases", "tenants:\n  - name: a\n    database_url: " + url + "\n    database_url_file: /x\n    schemas: [x]\n", "both set"},
		{"no schemas", "tenants:\n  - name: a\n    database_url: " + url + "\n", "no schemas or schema_match"},
		{"bad mode", "tenants:\n  - name: a\n    database_url: " + url + "\n    schemas: [x]\n    mode: fifo\n", `mode "fifo"`},
		{"pattern of every schema", "tenants:\n  - name: a\n    database_url: " + url + "\n    schema_match: '%%'\n", `tenant "a": schema_match: matches every schema`},
		{"owners without a pattern", "tenants:\n  - name: a\n    database_url: " + url + "\n    schemas: [x]\n    schema_owners: [app]\n", `tenant "a": schema_owners without schema_match`},
		{"owner with a comma", "tenants:\n  - name: a\n    database_url: " + url + "\n    schema_match: t%\n    schema_owners: ['app,ops']\n", `tenant "a": schema_owners: "app,ops" is not a role name`},
		{"owner unset", "tenants:\n  - name: a\n    database_url: " + url + "\n    schema_match: t%\n    schema_owners:\n      - ${NOPE}\n", `tenant "a": schema_owners: ${NOPE} is not set`},
		{"not postgres", "tenants:\n  - name: a\n    database_url: mysql://relay:hunter2@db/app\n    schemas: [x]\n", `tenant "a": database URL`},
		{"empty", "tenants: []\n", "no tenants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTenantsFile(writeTenants(t, tc.body), []string{"UNUSED=1"})
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, "RELAY_TENANTS_FILE") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q: want it to name RELAY_TENANTS_FILE and say %q", msg, tc.want)
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("error %q shows the password", msg)
			}
		})
	}
}

// The variables that say which outboxes are served refuse each other's
// company where it would be ambiguous, naming them.
func TestConfig_OutboxVariablesRefuseAmbiguity(t *testing.T) {
	t.Parallel()
	base := []string{"NATS_URL=nats://127.0.0.1:4222"}
	db := "DATABASE_URL=postgres://relay@127.0.0.1/app"
	file := "RELAY_TENANTS_FILE=" + writeTenants(t, "tenants:\n  - name: a\n    database_url: postgres://x@h/d\n    schemas: [x]\n")
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{db, "RELAY_SCHEMA=a", "RELAY_SCHEMAS=b,c"}, "RELAY_SCHEMAS"},
		{[]string{db, "RELAY_SCHEMAS=b,b"}, `"b" is listed twice`},
		{[]string{db, "RELAY_SCHEMAS=b,Bad"}, `"Bad" is not a valid schema name`},
		{[]string{db, "RELAY_SCHEMAS= , "}, "no schema in it"},
		{[]string{db, "RELAY_SCHEMA=a", "RELAY_SCHEMA_MATCH=t%"}, "RELAY_SCHEMA_MATCH"},
		{[]string{db, `RELAY_SCHEMA_MATCH=t\`}, "lone escape"},
		{[]string{db, "RELAY_SCHEMA_MATCH=%"}, "RELAY_SCHEMA_MATCH"},
		{[]string{db, "RELAY_SCHEMA_MATCH=%_%"}, "matches every schema"},
		{[]string{db, "RELAY_SCHEMA_MATCH=__"}, "matches every schema"},
		{[]string{db, "RELAY_SCHEMAS=a,b", "RELAY_SCHEMA_OWNERS=app"}, "RELAY_SCHEMA_OWNERS"},
		{[]string{db, "RELAY_SCHEMA_MATCH=t%", "RELAY_SCHEMA_OWNERS= , "}, "no role in it"},
		{[]string{db, "RELAY_SCHEMA_MATCH=t%", "RELAY_SCHEMA_OWNERS=app," + strings.Repeat("r", 64)}, "longer than a role name"},
		{[]string{file, "RELAY_SCHEMA_OWNERS=app"}, "set together with RELAY_SCHEMA_OWNERS"},
		{[]string{db, file}, "set together with DATABASE_URL"},
		{[]string{file, "RELAY_SCHEMA=a"}, "set together with RELAY_SCHEMA"},
		{[]string{db, "RELAY_DISCOVER_INTERVAL=1m"}, "RELAY_DISCOVER_INTERVAL"},
		{[]string{db, "RELAY_POLL_INTERVAL=100ms", "RELAY_IDLE_POLL_INTERVAL=50ms"}, "RELAY_IDLE_POLL_INTERVAL"},
		{[]string{db, "RELAY_READY_WHEN=most"}, "RELAY_READY_WHEN"},
	} {
		_, err := loadConfig(append(tc.env, base...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error saying %q", tc.env, err, tc.want)
		}
	}
}

// RELAY_SCHEMA_OWNERS reaches the fleet as the database's trusted owners;
// unset, it leaves them to the default.
func TestConfig_SchemaOwnersReachTheFleet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		owners string
		want   []string
	}{
		{"", nil},
		{" app_owner , tenants_admin,", []string{"app_owner", "tenants_admin"}},
	} {
		environ := []string{"DATABASE_URL=postgres://relay@127.0.0.1/app", "NATS_URL=nats://127.0.0.1:4222", `RELAY_SCHEMA_MATCH=tenant\_%`, "RELAY_SCHEMA_OWNERS=" + tc.owners}
		c, err := loadConfig(environ)
		if err != nil {
			t.Fatal(err)
		}
		dbs, err := c.databases(environ)
		if err != nil {
			t.Fatal(err)
		}
		if len(dbs) != 1 || !reflect.DeepEqual(dbs[0].Owners, tc.want) {
			t.Errorf("RELAY_SCHEMA_OWNERS=%q: databases %+v, want owners %q", tc.owners, dbs, tc.want)
		}
	}
}

// RELAY_IDLE_POLL_INTERVAL's default depends on how many outboxes are
// served: no backoff for one, a second for several.
func TestConfig_IdlePollDefaultFollowsTheOutboxes(t *testing.T) {
	t.Parallel()
	base := []string{"DATABASE_URL=postgres://relay@127.0.0.1/app", "NATS_URL=nats://127.0.0.1:4222"}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "50ms"},
		{[]string{"RELAY_SCHEMA=orders"}, "50ms"},
		{[]string{"RELAY_SCHEMAS=orders"}, "50ms"},
		{[]string{"RELAY_SCHEMAS=orders,billing"}, "1s"},
		{[]string{"RELAY_SCHEMA_MATCH=tenant%"}, "1s"},
		{[]string{"RELAY_SCHEMAS=orders,billing", "RELAY_IDLE_POLL_INTERVAL=5s"}, "5s"},
		{[]string{"RELAY_POLL_INTERVAL=2s", "RELAY_SCHEMA_MATCH=tenant%"}, "2s"},
	} {
		s := mustSettings(t, append(tc.env, base...))
		if got := s.Relay.IdlePollInterval.String(); got != tc.want {
			t.Errorf("%v: idle poll interval %s, want %s", tc.env, got, tc.want)
		}
	}
}

// RELAY_TENANTS_FILE has one size limit, tenantsFileLimit: the start-up
// check of the path refused a file above 64 KiB (the secrets' limit) that
// the reader took up to 1 MiB.
func TestTenantsFile_OneSizeLimitForThePathAndTheReader(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	tenants := "tenants:\n  - name: acme\n    database_url: " + db.URL + "\n    schemas: [" + db.Name + "]\n"
	pad := func(size int) string {
		line := "# " + strings.Repeat("-", 77) + "\n"
		body := tenants + strings.Repeat(line, (size-len(tenants))/len(line))
		return body + strings.Repeat("#", size-len(body))
	}
	var stdout, stderr bytes.Buffer
	big := writeTenants(t, pad(100<<10))
	code := run(context.Background(), []string{"status"}, []string{"RELAY_TENANTS_FILE=" + big}, &stdout, &stderr)
	if code != exitOK || !strings.Contains(stdout.String(), db.Name) {
		t.Errorf("status with a tenants file of 100 KiB: exit %d, want %d\nstdout: %s\nstderr: %s", code, exitOK, stdout.String(), stderr.String())
	}

	over := writeTenants(t, pad(tenantsFileLimit+1))
	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"status"}, []string{"RELAY_TENANTS_FILE=" + over}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "RELAY_TENANTS_FILE") || !strings.Contains(stderr.String(), "more than 1 MiB") {
		t.Errorf("status with a tenants file of 1 MiB and a byte: exit %d, want %d naming RELAY_TENANTS_FILE and 1 MiB\nstderr: %s", code, exitUsage, stderr.String())
	}

	// The reference and the help say the same limit.
	f := configField("RELAY_TENANTS_FILE")
	if want := "at most " + formatLimit(tenantsFileLimit); !strings.Contains(f.field.Tag.Get("allowed"), want) {
		t.Errorf("RELAY_TENANTS_FILE allows %q: want it to say %q", f.field.Tag.Get("allowed"), want)
	}
}
