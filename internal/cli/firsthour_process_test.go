package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
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
