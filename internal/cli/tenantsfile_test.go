package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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
    mode: ordered
`)
	got, err := readTenantsFile(path, []string{"ACME_PASSWORD=s3cret", "SECRETS=" + filepath.Dir(secret)})
	if err != nil {
		t.Fatal(err)
	}
	want := []tenant{
		{Name: "acme", DatabaseURL: "postgres://relay:s3cret@acme.internal/app?application_name=a$b", Schemas: []string{"orders", "billing"}},
		{Name: "globex", DatabaseURL: "postgres://relay:pw@globex.internal/app", SchemaMatch: `tenant\_%`, Mode: outbox.ModeOrdered},
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
