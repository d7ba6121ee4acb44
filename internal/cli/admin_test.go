package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// runCmd runs the binary's run with args against db and returns the exit
// code, stdout and stderr.
func runCmd(t *testing.T, db *dbtest.Schema, args ...string) (int, string, string) {
	t.Helper()
	var environ []string
	if db != nil {
		environ = []string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name}
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, environ, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// adminFixture holds two due rows (one for webhook) and two dead letters.
func adminFixture(t *testing.T) *dbtest.Schema {
	t.Helper()
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, destination) VALUES ('orders.created', 'x', NULL), ('orders.created', 'x', 'webhook')`)
	db.Exec(t, `
INSERT INTO %s.dead_letters (id, topic, payload, key, idempotency_key, created_at, attempts, reason, error) VALUES
    (7, 'orders.created', 'x', 'order-1', 'k7', now(), 1, 'permanent', 'nats: maximum payload exceeded'),
    (8, 'payments.done',  'x', NULL,      'k8', now(), 25, 'exhausted', 'after 25 attempts: timeout')`)
	return db
}

func TestStatusCommand(t *testing.T) {
	t.Parallel()
	db := adminFixture(t)

	code, stdout, stderr := runCmd(t, db, "status", "--json")
	if code != exitOK {
		t.Fatalf("status --json: exit %d, stderr %s", code, stderr)
	}
	var st admin.StatusReport
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("status --json printed %q: %v", stdout, err)
	}
	if len(st.Destinations) != 2 || st.Destinations[0].Destination != admin.DefaultSinkLabel || st.Destinations[0].Due != 1 ||
		st.DeadLetters.Total != 2 || len(st.Tables) != 4 {
		t.Errorf("status --json: %+v", st)
	}

	code, stdout, stderr = runCmd(t, db, "status")
	if code != exitOK {
		t.Fatalf("status: exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{"DESTINATION", "(default)", "webhook", "In flight: none", "Dead letters: 2", "permanent", "nats: maximum payload exceeded", "delivered_keys"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestStatusCommand_PartitionedModePrintsWhoHoldsWhichBuckets(t *testing.T) {
	t.Parallel()
	db := adminFixture(t)
	db.SetMode(t, "partitioned")
	db.Exec(t, `INSERT INTO %s.relays (id, version, mode) VALUES ('relay-a', 'v1', 'partitioned')`)
	db.Exec(t, `UPDATE %s.buckets SET owner = 'relay-a', epoch = 7, lease_until = now() + interval '10 seconds' WHERE bucket < 16 OR bucket = 20`)
	code, stdout, stderr := runCmd(t, db, "status")
	if code != exitOK {
		t.Fatalf("status: exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{"BUCKETS BY RELAY", "relay-a", "0-15,20", "(nobody)", "16-19,21-63"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestDeadListCommand(t *testing.T) {
	t.Parallel()
	db := adminFixture(t)

	code, stdout, stderr := runCmd(t, db, "dead", "list", "--topic", "orders.%")
	if code != exitOK {
		t.Fatalf("dead list: exit %d, stderr %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], "7 ") || lines[2] != "1 dead letter" {
		t.Errorf("dead list --topic orders.%% printed:\n%s", stdout)
	}

	code, stdout, _ = runCmd(t, db, "dead", "list", "--json", "--limit", "1")
	var list admin.DeadList
	if err := json.Unmarshal([]byte(stdout), &list); code != exitOK || err != nil {
		t.Fatalf("dead list --json: exit %d, %v, printed %q", code, err, stdout)
	}
	if list.Matched != 2 || len(list.Letters) != 1 || list.Letters[0].ID != 7 || list.Letters[0].Key != "order-1" {
		t.Errorf("dead list --json --limit 1: %+v", list)
	}

	code, stdout, _ = runCmd(t, db, "dead", "list", "--error", "nothing like this")
	if code != exitOK || stdout != "no dead letters match\n" {
		t.Errorf("dead list without matches: exit %d, %q", code, stdout)
	}
	code, _, stderr = runCmd(t, db, "dead", "list", "--since", "yesterday")
	if code != exitUsage || !strings.Contains(stderr, "RFC 3339") {
		t.Errorf("dead list --since yesterday: exit %d, stderr %s; want %d explaining the format", code, stderr, exitUsage)
	}
}

func TestDeadRetryCommand(t *testing.T) {
	t.Parallel()
	db := adminFixture(t)

	code, _, stderr := runCmd(t, db, "dead", "retry")
	if code != exitUsage || !strings.Contains(stderr, "--all") {
		t.Errorf("dead retry without a filter: exit %d, stderr %s; want %d pointing at --all", code, stderr, exitUsage)
	}
	code, stdout, stderr := runCmd(t, db, "dead", "retry", "--all", "--dry-run")
	if code != exitOK || stdout != "would retry 2 dead letters (dry run)\n" {
		t.Errorf("dead retry --all --dry-run: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	if db.Count(t, "dead_letters") != 2 {
		t.Fatal("a dry run changed the dead letters")
	}
	code, stdout, _ = runCmd(t, db, "dead", "retry", "--id", "8")
	if code != exitOK || !strings.HasPrefix(stdout, "retried 1 dead letter") || db.Count(t, "messages_all") != 3 {
		t.Errorf("dead retry --id 8: exit %d, %q, %d pending rows", code, stdout, db.Count(t, "messages_all"))
	}
	code, stdout, _ = runCmd(t, db, "dead", "purge", "--reason", "permanent")
	if code != exitOK || stdout != "purged 1 dead letter\n" || db.Count(t, "dead_letters") != 0 {
		t.Errorf("dead purge --reason permanent: exit %d, %q", code, stdout)
	}
}

func TestReplayAndCancelCommands(t *testing.T) {
	t.Parallel()
	db := adminFixture(t)
	db.Exec(t, `INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts) VALUES (1, 'orders.created', 'x', 'a1', now(), 1)`)
	db.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key) VALUES ('a1')`)

	code, _, stderr := runCmd(t, db, "replay", "--new-keys")
	if code != exitUsage || !strings.Contains(stderr, "--all") {
		t.Errorf("replay without a filter: exit %d, stderr %s", code, stderr)
	}
	code, stdout, stderr := runCmd(t, db, "replay", "--from", "1h", "--topic", "orders.created")
	if code != exitOK || !strings.HasPrefix(stdout, "replayed 1 event with original idempotency keys") || !strings.Contains(stdout, "forgot 1 delivered key") {
		t.Errorf("replay: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}

	code, _, stderr = runCmd(t, db, "cancel")
	if code != exitUsage || !strings.Contains(stderr, "--key or --topic") {
		t.Errorf("cancel without a filter: exit %d, stderr %s", code, stderr)
	}
	code, stdout, _ = runCmd(t, db, "cancel", "--topic", "orders.%", "--dry-run")
	if code != exitOK || stdout != "would cancel 3 pending rows (dry run)\n" {
		t.Errorf("cancel --dry-run: exit %d, %q", code, stdout)
	}
}

func TestAdminCommands_Refuse(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCmd(t, nil, "status")
	if code != exitUsage || !strings.Contains(stderr, "DATABASE_URL") {
		t.Errorf("status without DATABASE_URL: exit %d, stderr %s", code, stderr)
	}
	empty := dbtest.NewEmpty(t)
	code, _, stderr = runCmd(t, empty, "dead", "list")
	if code != exitFailure || !strings.Contains(stderr, "no outbox-relay tables") {
		t.Errorf("dead list on a schema without tables: exit %d, stderr %s", code, stderr)
	}
	for _, args := range [][]string{{"dead"}, {"dead", "bury"}, {"replay", "--by", "sent", "--all"}} {
		if code, _, _ := runCmd(t, empty, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	for _, args := range [][]string{{"status", "-h"}, {"dead", "-h"}, {"dead", "retry", "-h"}, {"replay", "-h"}, {"cancel", "-h"}} {
		code, stdout, stderr := runCmd(t, nil, args...)
		if code != exitOK || stdout != "" || !strings.HasPrefix(stderr, "Usage: outbox-relay "+args[0]) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want usage on stderr", args, code, stdout, stderr)
		}
	}
}

func TestDeadCommand_RefusesAnUnknownReason(t *testing.T) {
	t.Parallel()
	db := adminFixture(t)
	code, _, stderr := runCmd(t, db, "dead", "retry", "--reason", "nosink")
	if code != exitUsage || !strings.Contains(stderr, "no_sink") || !strings.Contains(stderr, "cancelled") {
		t.Errorf("dead retry --reason nosink: exit %d, %q; want 2 listing the valid reasons", code, stderr)
	}
}

// status names the transactions that have held back vacuum for more than a
// minute, with their pid, application, state and age, says when a role
// cannot see other roles' ages, and gives the way out; it says nothing
// while every snapshot is young.
func TestStatusCommand_PrintsAPinnedHorizon(t *testing.T) {
	t.Parallel()
	age := func(s float64) *float64 { return &s }
	pid := func(p int32) *int32 { return &p }
	st := &admin.StatusReport{Horizon: admin.HorizonStatus{Holders: []admin.HorizonHolder{
		{Holder: "session", PID: pid(4242), User: "analyst", ApplicationName: "nightly-report", State: "idle in transaction", AgeSeconds: age(754), AgeTransactions: 91234},
		{Holder: "session", PID: pid(77), User: "app", AgeTransactions: 9000},
		{Holder: "prepared", Name: "tx-17", User: "app", AgeSeconds: age(65), AgeTransactions: 8000},
		{Holder: "session", PID: pid(5), User: "outbox_relay", AgeSeconds: age(0.01), AgeTransactions: 2},
	}}}
	var out bytes.Buffer
	printHorizon(&out, st)
	got := out.String()
	for _, want := range []string{
		"Oldest snapshot: 12m34s old (session): it holds back vacuum",
		"4242", "nightly-report", "idle in transaction", "12m34s", "91234",
		"tx-17", "1m5s",
		"grant it pg_read_all_stats",
		"pg_terminate_backend(pid)", "idle_in_transaction_session_timeout",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "outbox_relay") {
		t.Errorf("status lists a snapshot younger than a minute:\n%s", got)
	}

	st.Horizon.Holders = st.Horizon.Holders[3:]
	out.Reset()
	printHorizon(&out, st)
	if out.Len() != 0 {
		t.Errorf("with every snapshot young, status printed:\n%s", out.String())
	}
}

// One dead letter whose headers are over the insert guard's budget does not
// stop the retry of the others; it is named by id with the reason.
func TestDeadRetryCommand_RetriesTheOthersAndNamesEachRefusedLetter(t *testing.T) {
	t.Parallel()
	db := adminFixture(t)
	db.Exec(t, `
INSERT INTO %s.dead_letters (id, topic, payload, headers, idempotency_key, created_at, attempts, reason, error)
VALUES (9, 'orders.created', 'x', jsonb_build_object('x-big', repeat('x', 20000)), 'k9', now(), 1, 'permanent', 'too many headers')`)
	code, stdout, stderr := runCmd(t, db, "dead", "retry", "--all")
	if code != exitOK || !strings.HasPrefix(stdout, "retried 2 dead letters") ||
		!strings.Contains(stdout, "left 1 dead letter in place") ||
		!strings.Contains(stdout, "\n  id 9: outbox: headers must be at most 16384 bytes of JSON") {
		t.Errorf("dead retry --all: exit %d, stdout %q, stderr %s; want 7 and 8 retried and 9 named with its reason", code, stdout, stderr)
	}
	if n := db.Count(t, "dead_letters"); n != 1 {
		t.Errorf("%d dead letters left, want 1 (id 9)", n)
	}
}
