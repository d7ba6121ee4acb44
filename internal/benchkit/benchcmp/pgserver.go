package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tempPostgres is a PostgreSQL server of the benchmark's own, with stock
// settings but for pg_stat_statements, in a temporary directory that
// stop deletes. The shared development server runs with autovacuum off,
// which a measurement of dead tuples cannot use.
type tempPostgres struct {
	bin   string // directory holding initdb and pg_ctl
	dir   string // temporary root: data/, postgres.log and the socket
	port  int
	runAs string // the user initdb and pg_ctl run as when we are root
}

// postgresConf are the only settings the benchmark's server changes from
// initdb's: pg_stat_statements loaded and tracking every statement, so
// that claim times and buffers come from the server for every contender
// alike; connections on loopback only, the socket in the temporary
// directory.
func postgresConf(port int, socketDir string) []string {
	return []string{
		"port=" + strconv.Itoa(port),
		"listen_addresses=127.0.0.1",
		"unix_socket_directories=" + socketDir,
		"shared_preload_libraries=pg_stat_statements",
		"pg_stat_statements.track=all",
	}
}

// findPostgresBin returns the directory of initdb and pg_ctl: explicit
// when set, else the newest /usr/lib/postgresql/<version>/bin (Debian's
// layout, which .ci/prerequisites installs), else the directory of an
// initdb on PATH.
func findPostgresBin(explicit string) (string, error) {
	if explicit != "" {
		if _, err := os.Stat(filepath.Join(explicit, "initdb")); err != nil {
			return "", fmt.Errorf("-pg-bin %s: %w", explicit, err)
		}
		return explicit, nil
	}
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
	return "", errors.New("initdb not found (neither /usr/lib/postgresql/*/bin/initdb nor on PATH): install PostgreSQL " +
		"(Debian: apt-get install postgresql, as .ci/prerequisites does), pass -pg-bin, or use an existing server with -pg-url")
}

// startTempPostgres initializes a cluster in a new temporary directory and
// starts it on port, or on a free port when port is taken, with the
// settings of postgresConf and then extra (name=value, -pg-conf: a later
// one wins). As root, initdb
// and pg_ctl run as the postgres user (they refuse root), which owns the
// directory.
func startTempPostgres(ctx context.Context, binDir string, port int, extra []string) (_ *tempPostgres, err error) {
	dir, err := os.MkdirTemp("", "outbox-pin-pg-")
	if err != nil {
		return nil, err
	}
	p := &tempPostgres{bin: binDir, dir: dir}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, initdb and pg_ctl must run as the postgres user (they refuse root): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		p.runAs = "postgres"
	}
	if err := p.run(ctx, "initdb", "-D", p.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	p.port = freePort(port)
	var opts []string
	for _, c := range append(postgresConf(p.port, dir), extra...) {
		opts = append(opts, "-c "+shellQuote(c))
	}
	if err := p.run(ctx, "pg_ctl", "-D", p.data(), "-l", filepath.Join(dir, "postgres.log"), "-w", "-t", "60",
		"-o", strings.Join(opts, " "), "start"); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, p.logTail())
	}
	return p, nil
}

func (p *tempPostgres) data() string { return filepath.Join(p.dir, "data") }

// url is the address of database db on the server.
func (p *tempPostgres) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

// run runs one of the server's tools, as p.runAs when set.
func (p *tempPostgres) run(ctx context.Context, tool string, args ...string) error {
	path := filepath.Join(p.bin, tool)
	var cmd *exec.Cmd
	switch {
	case p.runAs == "":
		cmd = exec.CommandContext(ctx, path, args...)
	case hasCommand("runuser"):
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", p.runAs, "--", path}, args...)...)
	default:
		quoted := []string{shellQuote(path)}
		for _, a := range args {
			quoted = append(quoted, shellQuote(a))
		}
		cmd = exec.CommandContext(ctx, "su", "-s", "/bin/sh", p.runAs, "-c", strings.Join(quoted, " "))
	}
	cmd.Dir = p.dir // the postgres user may not enter the caller's directory
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", tool, err, out)
	}
	return nil
}

// stop stops the server (fast shutdown, then immediate) and deletes its
// directory. It runs on a context of its own: it is called on the way out,
// also after an interrupt.
func (p *tempPostgres) stop() {
	if p.port != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := p.run(ctx, "pg_ctl", "-D", p.data(), "-m", "fast", "-w", "-t", "30", "stop"); err != nil {
			_ = p.run(ctx, "pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "-t", "20", "stop")
		}
	}
	_ = os.RemoveAll(p.dir)
}

// logTail returns the end of the server's log, for errors.
func (p *tempPostgres) logTail() string {
	data, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// freePort returns port when nothing listens on it on loopback, else a
// free port the system chose.
func freePort(port int) int {
	if port > 0 {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			_ = l.Close()
			return port
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return port
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func hasCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
