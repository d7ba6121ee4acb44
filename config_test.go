package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testdb"
)

// testSecret is a valid whsec_ secret (32 bytes).
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// base is a valid environment for run: a database URL and a sink.
var base = []string{"DATABASE_URL=postgres://u:hunter2@127.0.0.1:1/db", "NATS_URL=nats://127.0.0.1:1"}

// leaks are values of the cases below that must never be printed.
var leaks = []string{"hunter2", testSecret, "whsec_c2VjcmV0", "s3cr3t"}

func TestRun_RefusesBadConfigurationNamingTheVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  []string
		want []string // substrings of the error
	}{
		{[]string{"DATABASE_URL="}, []string{"DATABASE_URL is not set"}},
		{[]string{"RELAY_BATCH_SIZE=abc"}, []string{`RELAY_BATCH_SIZE="abc"`, "not a valid integer", "1 to 100000"}},
		{[]string{"RELAY_BATCH_SIZE=-5"}, []string{`RELAY_BATCH_SIZE="-5"`, "1 to 100000"}},
		{[]string{"RELAY_BATCH_SIZE=0"}, []string{`RELAY_BATCH_SIZE="0"`}},
		{[]string{"RELAY_POLL_INTERVAL=soon"}, []string{`RELAY_POLL_INTERVAL="soon"`, "duration"}},
		{[]string{"RELAY_POLL_INTERVAL=0s"}, []string{`RELAY_POLL_INTERVAL="0s"`, "1ms to 1m"}},
		{[]string{"RELAY_SCHEMA=bad;drop"}, []string{`RELAY_SCHEMA="bad;drop"`, "identifier"}},
		{[]string{"LOG_LEVEL=loud"}, []string{`LOG_LEVEL="loud"`, "debug, info, warn or error"}},
		{[]string{"LOG_FORMAT=xml"}, []string{`LOG_FORMAT="xml"`}},
		{[]string{"RELAY_SINK=kafka"}, []string{`RELAY_SINK="kafka"`, "configured: nats"}},
		{[]string{"RELAY_MIGRATE=maybe"}, []string{`RELAY_MIGRATE="maybe"`, "true or false"}},
		{[]string{"RELAY_LEASE=1s"}, []string{`RELAY_LEASE="1s"`}},
		{[]string{"RELAY_LEASE=5s", "NATS_ACK_TIMEOUT=5s"}, []string{`RELAY_LEASE="5s"`, "NATS_ACK_TIMEOUT=5s"}},
		{[]string{"RELAY_MAX_ATTEMPTS=0"}, []string{`RELAY_MAX_ATTEMPTS="0"`}},
		{[]string{"RELAY_BACKOFF_MIN=2s", "RELAY_BACKOFF_MAX=1s"}, []string{`RELAY_BACKOFF_MAX="1s"`}},
		{[]string{"RELAY_MAX_IN_FLIGHT=10"}, []string{`RELAY_MAX_IN_FLIGHT="10"`, "RELAY_BATCH_SIZE=1000"}},
		{[]string{"RELAY_HTTP_ADDR=nine"}, []string{`RELAY_HTTP_ADDR="nine"`}},
		{[]string{"RELAY_ARCHIVE_RETENTION=-1h"}, []string{`RELAY_ARCHIVE_RETENTION="-1h0m0s"`}},
		{[]string{"NATS_URL=http://x:4222"}, []string{"NATS_URL", `unsupported scheme "http"`}},
		{[]string{"NATS_SUBJECT_PREFIX=events"}, []string{`NATS_SUBJECT_PREFIX="events"`}},
		{[]string{"NATS_STREAM=EVENTS"}, []string{`NATS_STREAM="EVENTS"`, "NATS_SUBJECT_PREFIX is empty"}},
		{[]string{"NATS_ACK_TIMEOUT=0s"}, []string{`NATS_ACK_TIMEOUT="0s"`}},
		{[]string{"DATABASE_URL=postgres://u:hunter2@[::1"}, []string{"DATABASE_URL"}},
		{[]string{"DATABASE_URL=host=db password = hunter2 sslmode=bogus"}, []string{"DATABASE_URL"}},
		{[]string{"DATABASE_URL=host=db password='hunter2' port=notaport"}, []string{"DATABASE_URL"}},
		{[]string{"WEBHOOK_URL=ftp://s3cr3t@example.com/x", "WEBHOOK_SECRET=" + testSecret, "RELAY_SINK=nats"}, []string{"WEBHOOK_URL", `scheme "ftp"`}},
		{[]string{"WEBHOOK_URL=https://example.com/x"}, []string{"WEBHOOK_SECRET", "required with WEBHOOK_URL"}},
		{[]string{"WEBHOOK_URL=https://example.com/x", "WEBHOOK_SECRET=whsec_c2VjcmV0"}, []string{"WEBHOOK_SECRET", "not shown"}},
		{[]string{"WEBHOOK_SECRET=" + testSecret}, []string{"WEBHOOK_SECRET", "without WEBHOOK_URL"}},
		{[]string{"WEBHOOK_URL=https://example.com/x", "WEBHOOK_SECRET=" + testSecret}, []string{"RELAY_SINK", "nats or webhook"}},
		{[]string{"WEBHOOK_CONCURRENCY=0"}, []string{`WEBHOOK_CONCURRENCY="0"`, "1 to 1024"}},
		{[]string{"WEBHOOK_TIMEOUT=soon"}, []string{`WEBHOOK_TIMEOUT="soon"`}},
		{[]string{"WEBHOOK_URL=https://example.com/x", "WEBHOOK_SECRET=" + testSecret, "RELAY_SINK=webhook", "WEBHOOK_TIMEOUT=30s"}, []string{`RELAY_LEASE="30s"`, "WEBHOOK_TIMEOUT=30s"}},
		{[]string{"RELAY_CLOUDEVENTS_SOURCE=has space"}, []string{"RELAY_CLOUDEVENTS_SOURCE"}},
		// A timeout equal to the delivery budget (80% of the lease) would
		// never start a request.
		{[]string{"WEBHOOK_URL=https://example.com/x", "WEBHOOK_SECRET=" + testSecret, "RELAY_SINK=webhook", "WEBHOOK_TIMEOUT=24s"}, []string{`RELAY_LEASE="30s"`, "5/3 of WEBHOOK_TIMEOUT=24s"}},
		{[]string{"NATS_ACK_TIMEOUT=19s"}, []string{`RELAY_LEASE="30s"`, "NATS_ACK_TIMEOUT=19s"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.env, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := append(append([]string{}, base...), c.env...)
			// A configuration that passes validation would try to connect;
			// the deadline turns that into a failure instead of a hang.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			code := run(ctx, []string{"run"}, env, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit code %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not contain %q", stderr.String(), w)
				}
			}
			for _, secret := range leaks {
				if strings.Contains(stderr.String(), secret) {
					t.Errorf("stderr leaks %q: %s", secret, stderr.String())
				}
			}
		})
	}
}

func TestRun_RefusesToRunWithoutASink(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), nil, []string{"DATABASE_URL=postgres://127.0.0.1:1/db"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "NATS_URL") {
		t.Errorf("exit %d, stderr %q; want %d naming NATS_URL", code, stderr.String(), exitUsage)
	}
}

func TestRun_UnknownCommandPrintsUsage(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"frobnicate"}, nil, &stdout, &stderr); code != exitUsage {
		t.Errorf("exit code %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), `unknown command "frobnicate"`) || !strings.Contains(stderr.String(), "Usage:") {
		t.Errorf("stderr = %q", stderr.String())
	}
}

func TestRun_MigratePrintNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"migrate", "--print"}, []string{"RELAY_SCHEMA=events_out"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `CREATE TABLE "events_out".messages`) || !strings.Contains(stdout.String(), "COMMIT;") {
		t.Errorf("migrate --print output:\n%s", stdout.String())
	}
}

func TestRun_VersionAndHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"version"}, nil, &stdout, &stderr); code != exitOK || !strings.HasPrefix(stdout.String(), "outbox-relay ") {
		t.Errorf("version: exit %d, stdout %q", code, stdout.String())
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"--help"}, nil, &stdout, &stderr); code != exitOK {
		t.Errorf("--help: exit %d", code)
	}
	for _, v := range envReference() {
		if !strings.Contains(stdout.String(), v.Name) {
			t.Errorf("--help does not document %s", v.Name)
		}
	}
}

func TestRun_WithoutMigrationsRefusesASchemaThatIsBehind(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := run(ctx, []string{"run"}, []string{
		"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name, "RELAY_MIGRATE=false",
		"NATS_URL=nats://127.0.0.1:1", "RELAY_HTTP_ADDR=",
	}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "holds no outbox-relay tables") || !strings.Contains(stderr.String(), "migrate --print") {
		t.Errorf("exit %d, stderr %q; want 1 explaining how to create the tables", code, stderr.String())
	}
	var exists bool
	if err := db.Pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", db.Name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Error("RELAY_MIGRATE=false created the schema")
	}
}

func TestBench_RefusesToDropTheRelaysSchema(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "-schema", "outbox"},
		[]string{"DATABASE_URL=postgres://127.0.0.1:1/db", "NATS_URL=nats://127.0.0.1:1"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "RELAY_SCHEMA") {
		t.Errorf("exit %d, stderr %q; want %d refusing to drop the relay's schema", code, stderr.String(), exitUsage)
	}
}
