package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// What an operator meets in the first hour with the binary (issue 22):
// mistakes in the environment are named at once, and the operator's
// commands say what they do.

// runBinaryWithin runs the binary with args and env (added to PATH alone),
// killing it after limit, and returns its exit code (-1 when it had to be
// killed), stdout, stderr and how long it ran.
func runBinaryWithin(t *testing.T, limit time.Duration, env []string, args ...string) (int, string, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		return -1, stdout.String(), stderr.String(), took
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String(), took
}

func TestFirstHour_SecretFileThatIsNotASmallRegularFileIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	large := filepath.Join(dir, "large")
	if err := os.WriteFile(large, bytes.Repeat([]byte("x"), 64<<10+1), 0o600); err != nil {
		t.Fatal(err)
	}
	largePEM := filepath.Join(dir, "large.pem")
	if err := os.WriteFile(largePEM, bytes.Repeat([]byte("x"), 1<<20+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  []string
		want []string
	}{
		{[]string{"DATABASE_URL_FILE=/dev/zero"}, []string{"DATABASE_URL_FILE", "/dev/zero", "not a regular file"}},
		{[]string{"DATABASE_URL_FILE=" + fifo}, []string{"DATABASE_URL_FILE", "not a regular file: it is a named pipe"}},
		{[]string{"DATABASE_URL_FILE=" + dir}, []string{"DATABASE_URL_FILE", "not a regular file: it is a directory"}},
		{[]string{"DATABASE_URL_FILE=" + large}, []string{"DATABASE_URL_FILE", "65537 bytes, more than 64 KiB"}},
		{[]string{"DATABASE_URL=postgres://u@127.0.0.1/db", "NATS_URL=nats://127.0.0.1:4222", "NATS_TLS_CA_FILE=/dev/zero"},
			[]string{"NATS_TLS_CA_FILE", "not a regular file"}},
		{[]string{"DATABASE_URL=postgres://u@127.0.0.1/db", "NATS_URL=nats://127.0.0.1:4222", "NATS_CREDS_FILE=" + fifo},
			[]string{"NATS_CREDS_FILE", "a named pipe"}},
		{[]string{"DATABASE_URL=postgres://u@127.0.0.1/db", "WEBHOOK_URL=https://h.example.com/x", "WEBHOOK_SECRET=" + testSecret,
			"WEBHOOK_TLS_CA_FILE=" + largePEM}, []string{"WEBHOOK_TLS_CA_FILE", "more than 1 MiB"}},
	} {
		code, _, stderr, took := runBinaryWithin(t, 10*time.Second, tc.env, "run")
		if code != exitUsage {
			t.Errorf("%v: exit %d after %s, want %d (a configuration error)\nstderr: %s", tc.env, code, took.Round(time.Millisecond), exitUsage, stderr)
			continue
		}
		if took > 3*time.Second {
			t.Errorf("%v: refused after %s, want at once", tc.env, took)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", tc.env, w, stderr)
			}
		}
	}
}

func TestFirstHour_SecretFileBehindSymlinksStillWorks(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	// As Kubernetes mounts a secret: the file in a timestamped directory,
	// reached through ..data and a link named after the key.
	dir := t.TempDir()
	stamped := filepath.Join(dir, "..2026_01_02_15_04_05.123")
	if err := os.Mkdir(stamped, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stamped, "database-url"), []byte(db.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(stamped), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "database-url")
	if err := os.Symlink(filepath.Join("..data", "database-url"), link); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr, _ := runBinaryWithin(t, 30*time.Second, []string{"DATABASE_URL_FILE=" + link, "RELAY_SCHEMA=" + db.Name}, "status")
	if code != exitOK || !strings.Contains(stdout, "Schema "+db.Name) {
		t.Errorf("status with DATABASE_URL_FILE a link to the secret: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

func TestFirstHour_NoSinkErrorNamesTheMisspeltVariable(t *testing.T) {
	t.Parallel()
	code, _, stderr, _ := runBinaryWithin(t, 10*time.Second,
		[]string{"DATABASE_URL=postgres://u@127.0.0.1/db", "NATS_ULR=nats://127.0.0.1:4222", "RELAY_BACTH_SIZE=5"}, "run")
	if code != exitUsage {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitUsage, stderr)
	}
	for _, w := range []string{"no sink is configured", "did you mean NATS_URL? NATS_ULR is set"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if strings.Contains(stderr, "RELAY_BACTH_SIZE is set") {
		t.Errorf("the error blames a typo that has nothing to do with sinks:\n%s", stderr)
	}
}

func TestFirstHour_DatabaseURLWithAWrongSchemeSaysSo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"run"}, {"status"}, {"migrate"}} {
		code, _, stderr, _ := runBinaryWithin(t, 10*time.Second,
			[]string{"DATABASE_URL=postgress://app:hunter2@db.example.com/app", "NATS_URL=nats://127.0.0.1:4222"}, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d\nstderr: %s", args, code, exitUsage, stderr)
		}
		for _, w := range []string{"DATABASE_URL", `scheme "postgress://"`, "postgres://", "postgresql://", "key=value"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, w, stderr)
			}
		}
		for _, bad := range []string{"hunter2", "keyword/value"} {
			if strings.Contains(stderr, bad) {
				t.Errorf("%v: stderr shows %q:\n%s", args, bad, stderr)
			}
		}
	}
}

func TestPlaintextDatabase(t *testing.T) {
	t.Setenv("PGSSLMODE", "") // pgx reads it; the cases set sslmode themselves
	for _, tc := range []struct {
		dsn        string
		host, mode string // empty: no warning
	}{
		{"postgres://app:pw@db.example.com:5432/app", "db.example.com", "prefer"},
		{"postgres://app:pw@db.example.com/app?sslmode=prefer", "db.example.com", "prefer"},
		{"postgres://app:pw@db.example.com/app?sslmode=allow", "db.example.com", "allow"},
		{"postgres://app:pw@db.example.com/app?sslmode=disable", "db.example.com", "disable"},
		{"postgresql://app:pw@10.0.0.5/app", "10.0.0.5", "prefer"},
		{"host=db.example.com user=app password=pw dbname=app", "db.example.com", "prefer"},
		{"host=db.example.com user=app sslmode=disable", "db.example.com", "disable"},
		{"postgres://app@127.0.0.1,db.example.com/app", "db.example.com", "prefer"},
		{"postgres://app:pw@db.example.com/app?sslmode=require", "", ""},
		{"postgres://app:pw@db.example.com/app?sslmode=verify-ca", "", ""},
		{"postgres://app:pw@db.example.com/app?sslmode=verify-full", "", ""},
		{"host=db.example.com user=app sslmode=verify-full", "", ""},
		{"postgres://app:pw@127.0.0.1:5432/app", "", ""},
		{"postgres://app:pw@127.0.0.1:5432/app?sslmode=disable", "", ""},
		{"postgres://app:pw@localhost/app", "", ""},
		{"postgres://app:pw@[::1]:5432/app", "", ""},
		{"host=/var/run/postgresql user=app dbname=app", "", ""},
		{"postgres://app@%2Fvar%2Frun%2Fpostgresql/app", "", ""},
		{"postgress://app:pw@db.example.com/app", "", ""}, // refused elsewhere
	} {
		host, mode, ok := plaintextDatabase(tc.dsn)
		if ok != (tc.host != "") || host != tc.host || mode != tc.mode {
			t.Errorf("plaintextDatabase(%q) = %q, %q, %v; want %q, %q", tc.dsn, host, mode, ok, tc.host, tc.mode)
		}
	}
}

func TestFirstHour_RemoteDatabaseWithoutTLSIsWarnedAbout(t *testing.T) {
	t.Parallel()
	// 192.0.2.1 is TEST-NET-1: nothing answers, so the relay keeps trying to
	// connect; the warning comes before the first try.
	const warning = "DATABASE_URL allows a connection without TLS"
	for _, tc := range []struct {
		query string
		warn  bool
	}{
		{"connect_timeout=1", true},
		{"connect_timeout=1&sslmode=disable", true},
		{"connect_timeout=1&sslmode=require", false},
		{"connect_timeout=1&sslmode=verify-full", false},
	} {
		p := startProcess(t, "DATABASE_URL=postgres://app:hunter2@192.0.2.1:5432/app?"+tc.query, "NATS_URL=nats://127.0.0.1:4222")
		p.waitLog("cannot reach the database")
		var warnings []string
		for _, l := range p.log() {
			if strings.Contains(l, warning) {
				warnings = append(warnings, l)
			}
		}
		switch {
		case tc.warn && len(warnings) != 1:
			t.Errorf("%s: %d warnings, want one line naming DATABASE_URL and what to set:\n%s", tc.query, len(warnings), strings.Join(p.log(), "\n"))
		case tc.warn && !(strings.Contains(warnings[0], `"level":"WARN"`) && strings.Contains(warnings[0], `"host":"192.0.2.1"`) && strings.Contains(warnings[0], "sslmode=verify-full")):
			t.Errorf("%s: the warning lacks its level, the host or what to set: %s", tc.query, warnings[0])
		case !tc.warn && len(warnings) != 0:
			t.Errorf("%s: warned: %s", tc.query, warnings[0])
		}
		if strings.Contains(strings.Join(p.log(), "\n"), "hunter2") {
			t.Errorf("%s: the log shows the password", tc.query)
		}
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// operatorEnv is the environment of an operator's command on db.
func operatorEnv(db *dbtest.Schema) []string {
	return []string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name}
}

func TestFirstHour_DeadListShowsWholeErrorsOldestFailureFirst(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	long := "webhook: 422 Unprocessable Entity: " + strings.Repeat("field is invalid; ", 5) + "END-OF-ERROR"
	db.Exec(t, `
INSERT INTO %s.dead_letters (id, topic, payload, idempotency_key, created_at, attempts, reason, error, failed_at) VALUES
    (1, 'orders.created', 'x', 'key-failed-last',   now(), 1, 'permanent', $1, now()),
    (2, 'orders.created', 'x', 'key-failed-first',  now(), 1, 'permanent', 'boom', now() - interval '2 hours'),
    (3, 'orders.created', 'x', 'key-failed-second', now(), 1, 'permanent', 'boom', now() - interval '1 hour')`, long)

	code, stdout, stderr, _ := runBinaryWithin(t, 30*time.Second, operatorEnv(db), "dead", "list")
	if code != exitOK {
		t.Fatalf("dead list: exit %d\n%s", code, stderr)
	}
	first, second, last := strings.Index(stdout, "key-failed-first"), strings.Index(stdout, "key-failed-second"), strings.Index(stdout, "key-failed-last")
	if first < 0 || second < 0 || last < 0 || !(first < second && second < last) {
		t.Errorf("dead list is not oldest failure first, with the idempotency keys shown:\n%s", stdout)
	}
	if strings.Contains(stdout, "END-OF-ERROR") || !strings.Contains(stdout, "--wide") {
		t.Errorf("dead list without --wide: want the long error cut and --wide named:\n%s", stdout)
	}

	code, stdout, stderr, _ = runBinaryWithin(t, 30*time.Second, operatorEnv(db), "dead", "list", "--wide")
	if code != exitOK || !strings.Contains(stdout, long) {
		t.Errorf("dead list --wide: exit %d, want the whole error %q:\n%s%s", code, long, stdout, stderr)
	}
	code, stdout, stderr, _ = runBinaryWithin(t, 30*time.Second, operatorEnv(db), "dead", "list", "--json")
	if code != exitOK || !strings.Contains(stdout, long) {
		t.Errorf("dead list --json: exit %d, want the whole error:\n%s%s", code, stdout, stderr)
	}
}

func TestFirstHour_NegativeLimitsAreRefused(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.dead_letters (id, topic, payload, idempotency_key, created_at, attempts, reason, error) VALUES (1, 'a', 'x', 'k1', now(), 1, 'permanent', 'boom')`)
	for _, args := range [][]string{
		{"dead", "list", "--limit", "-1"},
		{"dead", "retry", "--all", "--limit=-1"},
		{"dead", "purge", "--all", "--limit", "-5"},
		{"status", "--top", "-1"},
	} {
		code, stdout, stderr, _ := runBinaryWithin(t, 30*time.Second, operatorEnv(db), args...)
		flag := args[len(args)-2]
		if strings.HasPrefix(args[len(args)-1], "--limit=") {
			flag = "--limit"
		}
		if code != exitUsage || !strings.Contains(stderr, flag) || !strings.Contains(stderr, "negative") {
			t.Errorf("%v: exit %d, want %d and an error naming %s\nstdout: %s\nstderr: %s", args, code, exitUsage, flag, stdout, stderr)
		}
	}
	if n := db.Count(t, "dead_letters"); n != 1 {
		t.Errorf("%d dead letters left, want the one untouched", n)
	}
}

func TestFirstHour_TopicPatternMatchingEverythingNeedsAll(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.dead_letters (id, topic, payload, idempotency_key, created_at, attempts, reason, error) VALUES
	    (1, 'orders.created', 'x', 'k1', now(), 1, 'permanent', 'boom'), (2, 'payments.done', 'x', 'k2', now(), 1, 'permanent', 'boom')`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('orders.created', 'x', 'order-1')`)
	for _, args := range [][]string{
		{"dead", "purge", "--topic", "%"},
		{"dead", "purge", "--topic", "%%"},
		{"dead", "retry", "--topic", "_%"},
		{"replay", "--topic", "%"},
		{"cancel", "--topic", "%"},
	} {
		code, stdout, stderr, _ := runBinaryWithin(t, 30*time.Second, operatorEnv(db), args...)
		if code != exitUsage || !strings.Contains(stderr, "matches every topic") {
			t.Errorf("%v: exit %d, want %d and an error saying the pattern matches every topic\nstdout: %s\nstderr: %s", args, code, exitUsage, stdout, stderr)
		}
	}
	if db.Count(t, "dead_letters") != 2 || db.Count(t, "messages_all") != 1 {
		t.Fatal("a refused command changed rows")
	}
	code, stdout, stderr, _ := runBinaryWithin(t, 30*time.Second, operatorEnv(db), "dead", "purge", "--topic", "orders.%")
	if code != exitOK || !strings.Contains(stdout, "purged 1 dead letter") {
		t.Errorf("dead purge --topic orders.%%: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, stderr, _ = runBinaryWithin(t, 30*time.Second, operatorEnv(db), "dead", "purge", "--topic", "%", "--all")
	if code != exitOK || !strings.Contains(stdout, "purged 1 dead letter") {
		t.Errorf("dead purge --topic %% --all: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

func TestFirstHour_OutputCountsAgreeWithTheirNouns(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	// One event delivered twice: one repeated delivery.
	for _, ago := range []string{"2 hours", "1 hour"} {
		db.Exec(t, `
INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts, delivered_at, duplicate)
VALUES ((SELECT coalesce(max(id), 0) + 1 FROM %s.archive), 'orders.created', 'x', 'k1', now() - $1::interval, 1, now() - $1::interval, false)`, ago)
	}
	// One row of key order-1 in flight.
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('orders.created', 'x', 'order-1')`)
	db.Exec(t, `UPDATE %s.messages SET leased_by = 'relay-1', leased_until = now() + interval '1 hour', attempts = 1`)

	code, stdout, stderr, _ := runBinaryWithin(t, 30*time.Second, operatorEnv(db), "replay", "--all", "--dry-run")
	if code != exitOK || !strings.Contains(stdout, "2 archived rows matched, 1 of them a repeated delivery") || strings.Contains(stdout, "1 repeat were") {
		t.Errorf("replay --dry-run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, stderr, _ = runBinaryWithin(t, 30*time.Second, operatorEnv(db), "cancel", "--key", "order-1", "--dry-run")
	if code != exitOK || !strings.Contains(stdout, "1 row in flight: a relay may be delivering it right now") {
		t.Errorf("cancel --dry-run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

func TestFirstHour_EveryCommandsHelpListsItsFlags(t *testing.T) {
	t.Parallel()
	_, help, _, _ := runBinaryWithin(t, 30*time.Second, nil, "help")
	_, deadHelp, _, _ := runBinaryWithin(t, 30*time.Second, nil, "dead", "-h")
	_, _, deadHelpErr, _ := runBinaryWithin(t, 30*time.Second, nil, "dead", "-h")
	deadHelp += deadHelpErr
	for _, inv := range helpInvocations() {
		name := strings.Join(inv, " ")
		code, _, usage, _ := runBinaryWithin(t, 30*time.Second, nil, append(inv, "-h")...)
		if code != exitOK {
			t.Errorf("%s -h: exit %d", name, code)
		}
		var flags []string
		for _, line := range strings.Split(usage, "\n") {
			if strings.HasPrefix(line, "  --") {
				flags = append(flags, strings.Fields(line)[0])
			}
		}
		// help shows the command's line with every flag its -h lists.
		var line string
		for _, l := range strings.Split(help, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), name+"  ") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("outbox-relay help has no line for %s:\n%s", name, help)
		}
		for _, f := range flags {
			if !strings.Contains(line+" ", " "+f+" ") {
				t.Errorf("outbox-relay help does not list %s %s: %q", name, f, line)
			}
			if inv[0] == "dead" && !strings.Contains(deadHelp, "  "+f) {
				t.Errorf("outbox-relay dead -h does not list %s %s", name, f)
			}
		}
		// help <command> is <command> -h, on stdout.
		_, helpOf, _, _ := runBinaryWithin(t, 30*time.Second, nil, append([]string{"help"}, inv...)...)
		if helpOf != usage {
			t.Errorf("outbox-relay help %s printed %q, want what %s -h prints", name, helpOf, name)
		}
	}
	// A mistake names the help that lists the flags it is about.
	code, _, stderr, _ := runBinaryWithin(t, 30*time.Second, nil, "dead", "list", "--bogus")
	if code != exitUsage || !strings.Contains(stderr, "outbox-relay dead list -h lists the flags") || !strings.Contains(stderr, "--bogus") {
		t.Errorf("dead list --bogus: exit %d, %s", code, stderr)
	}
}

func TestFirstHour_AMistypedCommandGetsASuggestion(t *testing.T) {
	t.Parallel()
	code, _, stderr, _ := runBinaryWithin(t, 10*time.Second, nil, "stauts")
	if code != exitUsage || !strings.HasPrefix(stderr, `outbox-relay: unknown command "stauts"; did you mean "status"?`) {
		t.Errorf("outbox-relay stauts: exit %d, want %d suggesting status\nstderr: %s", code, exitUsage, stderr)
	}
}

// Tracing settings the exporter would take and then fail every export
// with, or drop without a word, stop the binary at start.
func TestFirstHour_TracingSettingsThatCannotWorkAreRefusedAtStart(t *testing.T) {
	t.Parallel()
	base := []string{"DATABASE_URL=postgres://u@127.0.0.1/db", "NATS_URL=nats://127.0.0.1:4222", "OTEL_TRACES_EXPORTER=otlp"}
	for kv, want := range map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS=api-key=s3cret\nx-team=a":    "invalid OTEL_EXPORTER_OTLP_HEADERS",
		"OTEL_EXPORTER_OTLP_ENDPOINT=https://u:s3cret@collector": "give credentials in OTEL_EXPORTER_OTLP_HEADERS",
	} {
		code, _, stderr, _ := runBinaryWithin(t, 10*time.Second, append(append([]string{}, base...), kv), "run")
		if code != exitUsage || !strings.Contains(stderr, want) || strings.Contains(stderr, "s3cret") {
			t.Errorf("%q: exit %d, want %d saying %q without the secret\nstderr: %s", kv, code, exitUsage, want, stderr)
		}
	}
}

// A busy port is not an invalid setting: the relay says the address is in
// use, naming RELAY_HTTP_ADDR, and exits 1 (it was "invalid
// RELAY_HTTP_ADDR", exit 2).
func TestFirstHour_ABusyPortIsSaidToBeInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	db := dbtest.New(t)
	code, _, stderr, _ := runBinaryWithin(t, 20*time.Second, []string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name,
		"NATS_URL=nats://127.0.0.1:1", "RELAY_HTTP_ADDR=" + ln.Addr().String()}, "run")
	if code != 1 || !strings.Contains(stderr, "the address is already in use") || !strings.Contains(stderr, "RELAY_HTTP_ADDR") || strings.Contains(stderr, "invalid RELAY_HTTP_ADDR") {
		t.Errorf("a busy port: exit %d, want 1 saying the address is in use\nstderr: %s", code, stderr)
	}
}
