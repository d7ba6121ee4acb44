package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
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
		{[]string{"NATS_SUBJECT_PREFIX=" + strings.Repeat("a.", 257)}, []string{"NATS_SUBJECT_PREFIX", "514 bytes: at most 512"}},
		{[]string{"RELAY_MAX_PAYLOAD_BYTES=-1"}, []string{`RELAY_MAX_PAYLOAD_BYTES="-1"`, "out of range"}},
		{[]string{"RELAY_MAX_PAYLOAD_BYTES=2147483648"}, []string{`RELAY_MAX_PAYLOAD_BYTES="2147483648"`}},
		{[]string{"NATS_SUBJECT_PREFIX=ev\x01ents."}, []string{"NATS_SUBJECT_PREFIX", "control character"}},
		{[]string{"NATS_SUBJECT_PREFIX=events\u00a0."}, []string{"NATS_SUBJECT_PREFIX", "whitespace"}},
		{[]string{"KAFKA_TOPIC_PREFIX=_events."}, []string{`KAFKA_TOPIC_PREFIX="_events."`, "internal topics"}},
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
		{[]string{"WEBHOOK_MAX_BODY_BYTES=100"}, []string{`WEBHOOK_MAX_BODY_BYTES="100"`, "1024 to 1073741824"}},
		{[]string{"WEBHOOK_URL=https://example.com/x", "WEBHOOK_SECRET=" + testSecret, "RELAY_SINK=webhook", "WEBHOOK_TIMEOUT=30s"}, []string{`RELAY_LEASE="30s"`, "WEBHOOK_TIMEOUT=30s"}},
		{[]string{"RELAY_CLOUDEVENTS_SOURCE=has space"}, []string{"RELAY_CLOUDEVENTS_SOURCE"}},
		// A timeout equal to the delivery budget (80% of the lease) would
		// never start a request.
		{[]string{"WEBHOOK_URL=https://example.com/x", "WEBHOOK_SECRET=" + testSecret, "RELAY_SINK=webhook", "WEBHOOK_TIMEOUT=24s"}, []string{`RELAY_LEASE="30s"`, "5/3 of WEBHOOK_TIMEOUT=24s"}},
		{[]string{"NATS_ACK_TIMEOUT=19s"}, []string{`RELAY_LEASE="30s"`, "NATS_ACK_TIMEOUT=19s"}},
		{[]string{"KAFKA_BROKERS=kafka-1"}, []string{`KAFKA_BROKERS="kafka-1"`, "not host:port"}},
		{[]string{"KAFKA_BROKERS=kafka-1:9092,kafka-2:0"}, []string{"KAFKA_BROKERS", `"kafka-2:0" has no valid port`}},
		{[]string{"KAFKA_BROKERS=kafka-1:9092"}, []string{"RELAY_SINK", "nats or kafka"}},
		{[]string{"KAFKA_TOPIC_PREFIX=events/"}, []string{`KAFKA_TOPIC_PREFIX="events/"`, "letters, digits"}},
		{[]string{"KAFKA_TOPIC_PREFIX=__events."}, []string{`KAFKA_TOPIC_PREFIX="__events."`, "internal topics"}},
		{[]string{"KAFKA_PRODUCE_TIMEOUT=500ms"}, []string{`KAFKA_PRODUCE_TIMEOUT="500ms"`, "at least 1s"}},
		{[]string{"KAFKA_BROKERS=kafka-1:9092", "RELAY_SINK=kafka", "KAFKA_PRODUCE_TIMEOUT=19s"}, []string{`RELAY_LEASE="30s"`, "KAFKA_PRODUCE_TIMEOUT=19s"}},
		{[]string{"KAFKA_MAX_MESSAGE_BYTES=100"}, []string{`KAFKA_MAX_MESSAGE_BYTES="100"`, "512 to 104857600"}},
		// Each sink's struct is parsed on its own, so a field name that
		// two sinks share names the right variable.
		{[]string{"RABBITMQ_MAX_MESSAGE_BYTES=abc"}, []string{`RABBITMQ_MAX_MESSAGE_BYTES="abc"`, "1 to 536870912"}},
		{[]string{"KAFKA_SASL_MECHANISM=GSSAPI"}, []string{`KAFKA_SASL_MECHANISM="GSSAPI"`, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"}},
		{[]string{"KAFKA_SASL_MECHANISM=PLAIN", "KAFKA_SASL_PASSWORD=s3cr3t"}, []string{"KAFKA_SASL_USERNAME is not set", "required with KAFKA_SASL_MECHANISM"}},
		{[]string{"KAFKA_SASL_MECHANISM=SCRAM-SHA-256", "KAFKA_SASL_USERNAME=relay"}, []string{"KAFKA_SASL_PASSWORD is not set", "required with KAFKA_SASL_MECHANISM"}},
		{[]string{"KAFKA_SASL_PASSWORD=s3cr3t"}, []string{"KAFKA_SASL_PASSWORD", "not shown", "without KAFKA_SASL_MECHANISM"}},
		{[]string{"KAFKA_TLS_CA_FILE=testdata/kafka/ca.pem"}, []string{"KAFKA_TLS_CA_FILE", "without KAFKA_TLS=true"}},
		{[]string{"KAFKA_TLS=true", "KAFKA_TLS_CA_FILE=testdata/kafka/missing.pem"}, []string{"KAFKA_TLS_CA_FILE", "no such file"}},
		{[]string{"KAFKA_TLS=true", "KAFKA_TLS_CA_FILE=testdata/kafka/client-key.pem"}, []string{"KAFKA_TLS_CA_FILE", "no PEM certificate"}},
		{[]string{"KAFKA_TLS=true", "KAFKA_TLS_CERT_FILE=testdata/kafka/client.pem"}, []string{"KAFKA_TLS_KEY_FILE is not set", "required with KAFKA_TLS_CERT_FILE"}},
		{[]string{"KAFKA_TLS=true", "KAFKA_TLS_CERT_FILE=testdata/kafka/client.pem", "KAFKA_TLS_KEY_FILE=testdata/kafka/ca.pem"}, []string{"KAFKA_TLS_CERT_FILE", "client certificate"}},
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

func TestRun_UnknownCommandSuggestsTheClosest(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"stauts": "status", "statsu": "status", "stat": "status", "migarte": "migrate", "rn": "run",
		"dead-letters": "", "frobnicate": "", "x": "",
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{name}, nil, &stdout, &stderr)
		first, _, _ := strings.Cut(stderr.String(), "\n")
		wantLine := fmt.Sprintf("outbox-relay: unknown command %q", name)
		if want != "" {
			wantLine += fmt.Sprintf("; did you mean %q?", want)
		}
		if code != exitUsage || first != wantLine {
			t.Errorf("%s: exit %d, first line %q; want %d, %q", name, code, first, exitUsage, wantLine)
		}
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
	db := dbtest.NewEmpty(t)
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

func TestBench_RefusesASchemaOrStreamItDidNotCreate(t *testing.T) {
	t.Parallel()
	app := dbtest.NewEmpty(t)
	app.Exec(t, `CREATE SCHEMA %s`)
	app.Exec(t, `CREATE TABLE %s.orders (id int); INSERT INTO %s.orders VALUES (42)`)
	srv := natstest.Start(t)
	env := []string{"DATABASE_URL=" + app.URL, "NATS_URL=" + srv.URL(), "LOG_LEVEL=error"}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "-schema", app.Name, "-n", "10", "-timeout", "60s"}, env, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "not made by outbox-relay bench") {
		t.Errorf("bench -schema %s: exit %d, stderr %q; want a refusal", app.Name, code, stderr.String())
	}
	var n int
	if err := app.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+app.Table("orders")).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the application's table after bench: %d rows, %v", n, err)
	}

	// A scratch schema it made itself is reused, and a stream it did not
	// make is refused too.
	scratch := dbtest.NewEmpty(t)
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"bench", "-schema", scratch.Name, "-n", "50", "-timeout", "60s"}, env, &stdout, &stderr); code != exitOK {
		t.Fatalf("bench on a fresh scratch schema: exit %d, %s", code, stderr.String())
	}
	if code := run(context.Background(), []string{"bench", "-schema", scratch.Name, "-n", "50", "-timeout", "60s"}, env, &stdout, &stderr); code != exitOK {
		t.Fatalf("bench again on its own scratch schema: exit %d, %s", code, stderr.String())
	}
	if err := srv.JetStream().DeleteStream(context.Background(), "OUTBOX_BENCH"); err != nil {
		t.Fatal(err)
	}
	srv.CreateStream(t, "OUTBOX_BENCH", "someone.elses.>")
	stderr.Reset()
	if code := run(context.Background(), []string{"bench", "-schema", scratch.Name, "-n", "50", "-timeout", "60s"}, env, &stdout, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "stream OUTBOX_BENCH exists") {
		t.Errorf("bench with someone else's OUTBOX_BENCH stream: exit %d, %q", code, stderr.String())
	}
}

func TestConfig_SecretsFromFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(secretFile, []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dsnFile := filepath.Join(dir, "dsn")
	if err := os.WriteFile(dsnFile, []byte("postgres://u:hunter2@127.0.0.1:1/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig([]string{"DATABASE_URL_FILE=" + dsnFile, "WEBHOOK_URL=https://h.example.com/x", "WEBHOOK_SECRET_FILE=" + secretFile})
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://u:hunter2@127.0.0.1:1/db" || sinkEnvOf[webhookEnv](&c).Secret != testSecret {
		t.Errorf("read %q and %q from the files", c.DatabaseURL, sinkEnvOf[webhookEnv](&c).Secret)
	}
	for _, tc := range []struct {
		env  []string
		want []string
	}{
		{[]string{"WEBHOOK_SECRET=" + testSecret, "WEBHOOK_SECRET_FILE=" + secretFile}, []string{"WEBHOOK_SECRET_FILE", "set together with WEBHOOK_SECRET"}},
		{[]string{"DATABASE_URL_FILE=" + filepath.Join(dir, "missing")}, []string{"DATABASE_URL_FILE", "cannot read it"}},
	} {
		_, err := loadConfig(tc.env)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want %q", tc.env, err, w)
			}
		}
		if err != nil && (strings.Contains(err.Error(), testSecret) || strings.Contains(err.Error(), "hunter2")) {
			t.Errorf("%v: the error shows a secret: %v", tc.env, err)
		}
	}
}

func TestOutput_RowDataCannotRewriteTheTerminal(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.dead_letters (id, topic, payload, key, idempotency_key, destination, created_at, attempts, reason, error) VALUES
	  (1, E'orders\x1b[2J\x1b[H', 'x', E'k\nFORGED', 'id', E'dest\r\x1b[31m', now(), 1, 'permanent', E'boom\x1b]0;title\x07')`)
	for _, args := range [][]string{{"dead", "list"}, {"status"}} {
		code, stdout, stderr := runCmd(t, db, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, %s", args, code, stderr)
		}
		if strings.ContainsAny(stdout, "\x1b\r\x07") {
			t.Errorf("%v printed control characters from row data:\n%q", args, stdout)
		}
		if strings.Contains(stdout, "\nFORGED") {
			t.Errorf("%v let a row start a line of its own:\n%s", args, stdout)
		}
	}
	code, stdout, _ := runCmd(t, db, "dead", "list", "--json")
	if code != exitOK || !strings.Contains(stdout, `k\nFORGED`) {
		t.Errorf("--json does not carry the row's key as it is: %s", stdout)
	}
}

func TestConfig_TheLeaseRuleIsTheDocumentedOne(t *testing.T) {
	t.Parallel()
	for _, ok := range [][]string{
		{"RELAY_LEASE=3s", "NATS_ACK_TIMEOUT=1100ms"},
		{"RELAY_LEASE=2s", "NATS_ACK_TIMEOUT=1200ms"},
		{"RELAY_LEASE=2s", "NATS_ACK_TIMEOUT=1s", "WEBHOOK_URL=https://h.example.com/x", "WEBHOOK_SECRET=" + testSecret, "WEBHOOK_TIMEOUT=1200ms", "RELAY_SINK=nats"},
	} {
		if _, err := loadConfig(append(slices.Clone(base), ok...)); err != nil {
			t.Errorf("%v: %v; the lease is at least 5/3 of every timeout", ok, err)
		}
	}
	if _, err := loadConfig(append(slices.Clone(base), "RELAY_LEASE=2s", "NATS_ACK_TIMEOUT=1300ms")); err == nil {
		t.Error("RELAY_LEASE=2s with NATS_ACK_TIMEOUT=1300ms accepted: under 5/3")
	}
}

func TestConfig_UnknownVariablesNameTheClosestKnownOne(t *testing.T) {
	t.Parallel()
	got := unknownVariables([]string{"RELAY_BACTH_SIZE=5", "NATS_SUBJECT_PREFX=events.", "RELAY_BATCH_SIZE=5", "HOME=/root", "DATABASE_URL_FILE=/x", "TEST_DATABASE_URL=x"})
	want := []unknownVariable{{"RELAY_BACTH_SIZE", "RELAY_BATCH_SIZE"}, {"NATS_SUBJECT_PREFX", "NATS_SUBJECT_PREFIX"}}
	if !slices.Equal(got, want) {
		t.Errorf("unknownVariables = %v, want %v", got, want)
	}
}
