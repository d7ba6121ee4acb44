package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// docs/security.md's "Least privilege": the schema's owner applies the migrations
// with the binary and grants migrations/least_privilege.sql; a relay, a
// producer and an operator then do their work with those grants only.

// runBinary runs the binary with args and env (added to PATH alone) and
// returns its exit code, stdout and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// leastPrivilegeSchema is a schema its owner migrated with `outbox-relay
// migrate` and granted least_privilege.sql on.
func leastPrivilegeSchema(t *testing.T) *dbtest.LeastPrivilege {
	t.Helper()
	lp := dbtest.NewOwnedEmpty(t)
	code, stdout, stderr := runBinary(t, []string{"DATABASE_URL=" + lp.Owner.URL, "RELAY_SCHEMA=" + lp.Name}, "migrate")
	if code != exitOK || !strings.Contains(stdout, "migrated to version") {
		t.Fatalf("outbox-relay migrate as the schema's owner: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	lp.Grant(t)
	return lp
}

// produce inserts, as the producer role, the rows from to to of topic for
// each key (without a key for ""), with headers and idempotency keys
// topic/key/seq that sort in insert order per key, the way the examples
// of docs/writing-rows.md do.
func produce(t *testing.T, lp *dbtest.LeastPrivilege, topic string, from, to int, keys ...string) {
	t.Helper()
	conn := lp.ConnAs(t, lp.Producer)
	ctx := context.Background()
	for seq := from; seq <= to; seq++ {
		for _, key := range keys {
			var k any
			if key != "" {
				k = key
			}
			payload, _ := json.Marshal(orderedEvent{Key: key, Seq: seq})
			_, err := conn.Exec(ctx, "INSERT INTO "+migrations.Quote(lp.Name)+".messages (topic, payload, key, headers, idempotency_key)"+
				" VALUES ($1, $2, $3, $4::jsonb, $5) ON CONFLICT (idempotency_key) DO NOTHING",
				topic, payload, k, `{"content-type": "application/json"}`, fmt.Sprintf("%s/%s/%04d", topic, key, seq))
			if err != nil {
				t.Fatalf("the producer inserts: %v", err)
			}
		}
	}
}

// stopRelay sends SIGTERM and expects a clean exit.
func stopRelay(t *testing.T, p *process) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(20 * time.Second); code != 0 {
		t.Errorf("after SIGTERM the relay exited %d, want 0", code)
	}
}

// assertNoPermissionErrors fails t when the relay logged a refused
// statement (pgx ends its errors with "(SQLSTATE 42501)"; the bare code also
// matched timestamps such as 12:41:05.425013494).
func assertNoPermissionErrors(t *testing.T, p *process) {
	t.Helper()
	for _, line := range p.log() {
		if strings.Contains(line, "permission denied") || strings.Contains(line, "SQLSTATE 42501") {
			t.Errorf("the relay's role was refused: %s", line)
		}
	}
}

func TestProcess_LeastPrivilegeRelayDeliversArchivesAndDeadLetters(t *testing.T) {
	t.Parallel()
	lp := leastPrivilegeSchema(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	produce(t, lp, "events.orders.created", 1, 50, "", "order-1", "order-2")
	// A row for NATS's control plane is dead-lettered, never published.
	produce(t, lp, "$JS.API.STREAM.DELETE.EVENTS", 1, 1, "evil")
	// Its id is a dead letter's already (an operator's mistake): the relay
	// takes a new one from the sequence for its dead letter.
	lp.Exec(t, `INSERT INTO %s.dead_letters (id, topic, payload, idempotency_key, created_at, attempts, reason, error)
	    SELECT max(id), 'older', 'x', 'older', now(), 1, 'failed', 'older' FROM %s.messages`)

	p := startProcess(t, "DATABASE_URL="+lp.Relay.URL, "RELAY_SCHEMA="+lp.Name, "NATS_URL="+srv.URL(),
		"RELAY_MIGRATE=false", "RELAY_NOTIFY=true")
	relaytest.WaitDrained(t, lp.Schema, relaytest.Budget(151))
	relaytest.AssertStreamMatchesArchive(t, lp.Schema, srv, "EVENTS", 150)
	if n := lp.Count(t, "dead_letters"); n != 2 {
		t.Errorf("dead_letters holds %d rows, want the control-plane row and the older one", n)
	}
	// A row inserted while the relay runs (RELAY_NOTIFY wakes it).
	produce(t, lp, "events.orders.paid", 1, 1, "order-1")
	relaytest.WaitDrained(t, lp.Schema, relaytest.Budget(1))
	stopRelay(t, p)
	assertNoPermissionErrors(t, p)
	if n := lp.Count(t, "relays"); n != 0 {
		t.Errorf("relays holds %d rows after a clean shutdown, want the relay gone", n)
	}
	// least_privilege.sql does not grant pg_read_all_stats: the relay says
	// once that its snapshot-age gauge sees only its own role's sessions.
	warned := 0
	for _, line := range p.log() {
		if strings.Contains(line, "grant pg_read_all_stats to the role") && strings.Contains(line, "WARN") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("the relay's role has no pg_read_all_stats; the relay warned about it %d times, want once", warned)
	}
}

func TestProcess_LeastPrivilegeOrderedRelayKeepsKeysInOrder(t *testing.T) {
	t.Parallel()
	lp := leastPrivilegeSchema(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	keys := []string{"k1", "k2", "k3", "k4", "k5", ""}
	// Rows before the relay switches the schema to ordered mode and after.
	produce(t, lp, "events.ordered", 1, 20, keys...)
	p := startProcess(t, "DATABASE_URL="+lp.Relay.URL, "RELAY_SCHEMA="+lp.Name, "NATS_URL="+srv.URL(),
		"RELAY_MIGRATE=false", "RELAY_ORDERED=true")
	p.waitLog(`"relay started"`)
	var mode string
	if err := lp.Pool.QueryRow(context.Background(), "SELECT mode FROM "+lp.Table("relay_mode")).Scan(&mode); err != nil || mode != "ordered" {
		t.Fatalf("schema mode = %q, %v; want ordered", mode, err)
	}
	produce(t, lp, "events.ordered", 21, 40, keys...)
	relaytest.WaitDrained(t, lp.Schema, relaytest.Budget(240))
	relaytest.AssertStreamMatchesArchive(t, lp.Schema, srv, "EVENTS", 240)

	assertStreamInKeyOrder(t, srv)
	stopRelay(t, p)
	assertNoPermissionErrors(t, p)
}

// assertStreamInKeyOrder checks that, per key, the stream EVENTS holds
// the rows produce wrote in insert order (by their idempotency keys).
func assertStreamInKeyOrder(t *testing.T, srv *natstest.Server) {
	t.Helper()
	last := map[string]string{}
	for _, m := range srv.Messages(t, "EVENTS") {
		var e orderedEvent
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatal(err)
		}
		if e.Key == "" {
			continue
		}
		id := m.Header.Get(nats.MsgIdHdr)
		if prev := last[e.Key]; prev != "" && id <= prev {
			t.Errorf("key %s: %s arrived after %s", e.Key, id, prev)
		}
		last[e.Key] = id
	}
}

func TestProcess_LeastPrivilegePartitionedRelayOwnsTheBucketsAndKeepsKeysInOrder(t *testing.T) {
	t.Parallel()
	lp := leastPrivilegeSchema(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	keys := []string{"k1", "k2", "k3", "k4", "k5", ""}
	// Rows before the relay switches the schema to partitioned mode (the
	// switch builds the per-bucket index as the schema's owner) and after.
	produce(t, lp, "events.partitioned", 1, 20, keys...)
	p := startProcess(t, "DATABASE_URL="+lp.Relay.URL, "RELAY_SCHEMA="+lp.Name, "NATS_URL="+srv.URL(),
		"RELAY_MIGRATE=false", "RELAY_MODE=partitioned")
	p.waitLog(`"acquired buckets"`)
	var mode string
	var owned int
	if err := lp.Pool.QueryRow(context.Background(), "SELECT (SELECT mode FROM "+lp.Table("relay_mode")+"), (SELECT count(*) FROM "+
		lp.Table("buckets")+" WHERE owner IS NOT NULL)").Scan(&mode, &owned); err != nil || mode != "partitioned" || owned != 64 {
		t.Fatalf("schema mode = %q, %d buckets owned, %v; want partitioned and 64", mode, owned, err)
	}
	produce(t, lp, "events.partitioned", 21, 40, keys...)
	relaytest.WaitDrained(t, lp.Schema, relaytest.Budget(240))
	relaytest.AssertStreamMatchesArchive(t, lp.Schema, srv, "EVENTS", 240)
	assertStreamInKeyOrder(t, srv)
	stopRelay(t, p)
	assertNoPermissionErrors(t, p)
	if err := lp.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+lp.Table("buckets")+" WHERE owner IS NOT NULL").Scan(&owned); err != nil || owned != 0 {
		t.Errorf("%d buckets still owned after a clean shutdown (%v), want all released", owned, err)
	}
}

func TestProcess_LeastPrivilegeRelayWithMigrationsOnExplainsWhatToDo(t *testing.T) {
	t.Parallel()
	lp := leastPrivilegeSchema(t)
	srv := natstest.Start(t)
	missing := dbtest.NewEmpty(t) // a schema nobody created yet
	for name, schema := range map[string]string{"migrated schema": lp.Name, "missing schema": missing.Name} {
		// RELAY_MIGRATE is left at its default, true.
		p := startProcess(t, "DATABASE_URL="+lp.Relay.URL, "RELAY_SCHEMA="+schema, "NATS_URL="+srv.URL())
		if code := p.wait(30 * time.Second); code == 0 {
			t.Errorf("%s: the relay's role started with RELAY_MIGRATE=true: exit 0", name)
		}
		out := strings.Join(p.log(), "\n")
		for _, want := range []string{"outbox-relay run: apply the migrations at start (RELAY_MIGRATE=true)", "permission denied",
			"Run the relay with RELAY_MIGRATE=false", "the schema's owner", "`outbox-relay migrate`", "`outbox-relay migrate --print`",
			"migrations/least_privilege.sql"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the relay's error lacks %q:\n%s", name, want, out)
			}
		}
	}
	// The relay's role cannot migrate by hand either, and is told who can.
	code, _, stderr := runBinary(t, []string{"DATABASE_URL=" + lp.Relay.URL, "RELAY_SCHEMA=" + lp.Name}, "migrate")
	if code != exitFailure || !strings.Contains(stderr, "as the schema's owner") || !strings.Contains(stderr, "migrate --print") {
		t.Errorf("migrate as the relay's role: exit %d, stderr %s", code, stderr)
	}
	// A role without the grants is told where they are.
	stranger := dbtest.NewRole(t, "stranger")
	code, _, stderr = runBinary(t, []string{"DATABASE_URL=" + stranger.URL, "RELAY_SCHEMA=" + lp.Name}, "status")
	if code != exitFailure || !strings.Contains(stderr, "permission denied") || !strings.Contains(stderr, "least_privilege.sql") {
		t.Errorf("status as a role without grants: exit %d, stderr %s", code, stderr)
	}
}

func TestProcess_LeastPrivilegeOperatorCommands(t *testing.T) {
	t.Parallel()
	lp := leastPrivilegeSchema(t)
	produce(t, lp, "orders.created", 1, 2, "order-1", "order-2")
	lp.Exec(t, `
INSERT INTO %s.dead_letters (id, topic, payload, key, idempotency_key, created_at, attempts, reason, error) VALUES
    (7, 'orders.created', 'x', 'order-7', 'k7', now(), 1, 'permanent', 'nats: maximum payload exceeded'),
    (8, 'payments.done',  'x', NULL,      'k8', now(), 25, 'exhausted', 'after 25 attempts: timeout')`)
	lp.Exec(t, `
INSERT INTO %s.archive (id, topic, payload, key, idempotency_key, created_at, attempts, delivered_at) VALUES
    (100, 'orders.shipped', 'x', 'order-9', 'k100', now() - interval '1 hour', 1, now() - interval '1 hour')`)
	lp.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key, delivered_at) VALUES ('k100', now() - interval '1 hour')`)
	env := []string{"DATABASE_URL=" + lp.Operator.URL, "RELAY_SCHEMA=" + lp.Name}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "Dead letters: 2"},
		{[]string{"status", "--json", "--exact"}, `"destinations"`},
		{[]string{"dead", "list"}, "2 dead letters"},
		{[]string{"dead", "retry", "--id", "7"}, "retried 1 dead letter"},
		{[]string{"dead", "purge", "--id", "8"}, "purged 1 dead letter"},
		{[]string{"replay", "--topic", "orders.shipped"}, "replayed 1 event"},
		{[]string{"cancel", "--key", "order-2"}, "cancelled 2 pending rows"},
	} {
		code, stdout, stderr := runBinary(t, env, c.args...)
		if code != exitOK || !strings.Contains(stdout+stderr, c.want) {
			t.Errorf("%s as the operator: exit %d, want output with %q\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), code, c.want, stdout, stderr)
		}
	}
	// order-1's 2 rows, the retried dead letter and the replayed row are
	// pending; order-2's rows were cancelled into the dead letters.
	if n := lp.Count(t, "messages_all"); n != 4 {
		t.Errorf("messages holds %d rows, want 4", n)
	}
	if n := lp.Count(t, "dead_letters"); n != 2 {
		t.Errorf("dead_letters holds %d rows, want order-2's 2 cancelled rows", n)
	}
	if n := lp.Count(t, "delivered_keys"); n != 0 {
		t.Errorf("delivered_keys holds %d rows, want the replayed key forgotten", n)
	}
}
