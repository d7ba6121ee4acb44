package dbtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is a PostgreSQL server of one test's own, which the test may stop
// and start again (a database that goes away under a relay serving several
// databases), in a temporary directory deleted at cleanup. It runs with
// initdb's settings, trust authentication, on loopback only, on a free
// port that it keeps across restarts.
type Server struct {
	t     testing.TB
	bin   string // directory of initdb and pg_ctl
	dir   string // temporary root: data/, postgres.log and the socket
	port  int
	runAs string // the user initdb and pg_ctl run as when the test is root
}

// StartServer initializes a cluster and starts it; the server is stopped
// and its directory deleted at cleanup. It fails t, never skips, when
// PostgreSQL's server binaries are missing or the server does not start,
// saying why. As root, initdb and pg_ctl run as the postgres user (they
// refuse root) through runuser or su.
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin, err := serverBin()
	if err != nil {
		t.Fatalf("start a PostgreSQL server of the test's own: %v", err)
	}
	// Not t.TempDir(): its parents are the test user's alone, and the
	// postgres user must enter this directory.
	dir, err := os.MkdirTemp("", "outbox-relay-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: dir}
	t.Cleanup(s.cleanup)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("start a PostgreSQL server of the test's own: running as root, initdb and pg_ctl must run as the postgres user (they refuse root), which does not exist: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("start a PostgreSQL server of the test's own: give %s to the postgres user: %v", dir, err)
		}
		s.runAs = "postgres"
	}
	if err := s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("start a PostgreSQL server of the test's own: %v", err)
	}
	s.port, err = freePort()
	if err != nil {
		t.Fatalf("start a PostgreSQL server of the test's own: find a free port: %v", err)
	}
	s.Start()
	return s
}

// serverBin returns the directory of initdb and pg_ctl: the newest
// /usr/lib/postgresql/<version>/bin (Debian's layout), else that of an
// initdb on PATH.
func serverBin() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) > 0 {
		version := func(p string) int {
			v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
			return v
		}
		slices.SortFunc(found, func(a, b string) int { return version(a) - version(b) })
		return filepath.Dir(found[len(found)-1]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("initdb not found (neither /usr/lib/postgresql/*/bin/initdb nor on PATH): install PostgreSQL's server (Debian: apt-get install postgresql)")
}

// URL is the connection string of the server's postgres database.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Port is the port the server listens on.
func (s *Server) Port() int { return s.port }

// Start starts the server (again) and waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	opts := strings.Join([]string{
		"-c port=" + strconv.Itoa(s.port),
		"-c listen_addresses=127.0.0.1",
		"-c unix_socket_directories=" + s.dir,
		"-c max_connections=50",
		"-c fsync=off",
	}, " ")
	if err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "postgres.log"), "-w", "-t", "120", "-o", opts, "start"); err != nil {
		s.t.Fatalf("start the test's PostgreSQL server on port %d: %v\n%s", s.port, err, s.logTail())
	}
}

// Stop stops the server as `pg_ctl stop -m fast` does: sessions are ended,
// and new connections are refused until Start.
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.run("pg_ctl", "-D", s.data(), "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
		s.t.Fatalf("stop the test's PostgreSQL server: %v\n%s", err, s.logTail())
	}
}

// cleanup stops the server if it runs and deletes its directory.
func (s *Server) cleanup() {
	if _, err := os.Stat(filepath.Join(s.data(), "postmaster.pid")); err == nil {
		if err := s.run("pg_ctl", "-D", s.data(), "-m", "fast", "-w", "-t", "30", "stop"); err != nil {
			_ = s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "-t", "20", "stop")
		}
	}
	_ = os.RemoveAll(s.dir)
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// run runs one of the server's tools, as s.runAs when set.
func (s *Server) run(tool string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	path := filepath.Join(s.bin, tool)
	var cmd *exec.Cmd
	switch {
	case s.runAs == "":
		cmd = exec.CommandContext(ctx, path, args...)
	case hasCommand("runuser"):
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", s.runAs, "--", path}, args...)...)
	case hasCommand("su"):
		quoted := []string{shellQuote(path)}
		for _, a := range args {
			quoted = append(quoted, shellQuote(a))
		}
		cmd = exec.CommandContext(ctx, "su", "-s", "/bin/sh", s.runAs, "-c", strings.Join(quoted, " "))
	default:
		return fmt.Errorf("%s must run as the postgres user, and neither runuser nor su is on PATH", tool)
	}
	cmd.Dir = s.dir // the postgres user may not enter the caller's directory
	// pg_ctl start leaves the server running with the command's output
	// descriptors: a file, not a pipe that CombinedOutput would wait on.
	out, err := os.CreateTemp("", "outbox-relay-pg-out-")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	if err != nil {
		b, _ := os.ReadFile(out.Name())
		return fmt.Errorf("%s: %w\n%s", tool, err, b)
	}
	return nil
}

// logTail returns the end of the server's log, for errors.
func (s *Server) logTail() string {
	data, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// freePort returns a port nothing listens on on loopback.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func hasCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
