package cli

import (
	"net/http"
	"strings"
	"testing"
)

// The standalone console shows every outbox of RELAY_TENANTS_FILE, tenant
// and schema named, and a line saying why for a tenant whose database is
// down; the others' pages still answer.
func TestConsole_ShowsEveryTenantsOutboxAndSaysWhichCannotBeRead(t *testing.T) {
	t.Parallel()
	a, b := twoOutboxes(t)
	p := startCommand(t, []string{"console", "--addr", "127.0.0.1:0"}, tenantsWithOneDown(t, a, b)...)
	base := standaloneConsole(t, p)

	status, body := get(t, base)
	if status != http.StatusOK {
		t.Fatalf("overview: %d\n%s", status, body)
	}
	for _, want := range []string{"acme", "beta", "down", `href="/console/o/acme/` + a.Name + `/"`, `href="/console/o/beta/` + b.Name + `/"`, "cannot be read"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview: no %q in\n%s", want, body)
		}
	}
	if status, body = get(t, base+"o/beta/"+b.Name+"/"); status != http.StatusOK || !strings.Contains(body, "ordered mode") {
		t.Errorf("beta's outbox page: %d\n%s", status, body)
	}
	if status, _ = get(t, base+"o/down/outbox/"); status != http.StatusBadGateway {
		t.Errorf("the outbox page of a tenant whose database is down: %d, want 502", status)
	}
	if status, _ = get(t, base+"o/acme/"+b.Name+"/"); status != http.StatusNotFound {
		t.Errorf("beta's schema under acme: %d, want 404", status)
	}
	if status, body = get(t, base+"horizon"); status != http.StatusOK || !strings.Contains(body, "no outbox of this database can be read") {
		t.Errorf("horizon with a database down: %d\n%s", status, body)
	}
}

// RELAY_CONSOLE needs the HTTP endpoint, and a secret must be long enough
// to guess slowly: both refused at start, naming the variable.
func TestConsole_SettingsAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"RELAY_CONSOLE=true", "RELAY_HTTP_ADDR="}, "RELAY_CONSOLE"},
		{[]string{"RELAY_CONSOLE_SECRET=s3cr3tXYZ"}, "RELAY_CONSOLE_SECRET"},
	} {
		code, _, stderr := runEnv(t, append([]string{"DATABASE_URL=" + closedDatabaseURL}, tc.env...), "console")
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "s3cr3tXYZ") {
			t.Errorf("%v: exit %d, stderr %s; want %d naming %s without the secret", tc.env, code, stderr, exitUsage, tc.want)
		}
	}
}
