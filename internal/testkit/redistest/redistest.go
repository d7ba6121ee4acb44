// Package redistest starts a real redis-server (the Debian package's
// binary) for each test, on a free loopback port, without persistence, and
// reads back what the relay appended. A server can be stopped and started
// again on the same port, keeping its data, for outage tests; it can add
// ACL users, and listen with TLS beside its plaintext port.
//
// When redis-server is not on the PATH the test fails with instructions:
// Redis tests never skip.
package redistest

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

const howToInstall = "These tests start their own redis-server and never skip. Debian: apt-get install redis-server (`bash .ci/prerequisites` does it); the tests need only the binary, not the service."

// TLS makes the server listen with TLS too (Server.TLSAddr), with the
// server's certificate and key and the CA that verifies clients' ones.
type TLS struct {
	CertFile, KeyFile, CAFile string
	// RequireClientCert makes the server refuse clients without a
	// certificate the CA signed.
	RequireClientCert bool
}

// Options configure a server; the zero value is a plain server.
type Options struct {
	// TLS, when set, adds a TLS port.
	TLS *TLS
	// Config are more configuration directives, "name value" each.
	Config []string
}

// Server is a redis-server process for one test, killed at cleanup.
type Server struct {
	// Addr is the plaintext address, 127.0.0.1:port; the default user has
	// no password there.
	Addr string
	// TLSAddr is the TLS address, when Options.TLS was set.
	TLSAddr string

	t    testing.TB
	opts Options
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	output bytes.Buffer
	admin  *goredis.Client
}

// Start starts a server for t.
func Start(t testing.TB, opts ...Options) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not on the PATH: %v\n%s", err, howToInstall)
	}
	s := &Server{t: t, dir: t.TempDir()}
	if len(opts) > 0 {
		s.opts = opts[0]
	}
	t.Cleanup(func() {
		s.kill()
		if s.admin != nil {
			_ = s.admin.Close()
		}
		if t.Failed() {
			s.mu.Lock()
			t.Logf("redis-server output:\n%s", s.output.String())
			s.mu.Unlock()
		}
	})
	// A free port may be taken by another process between freePort and
	// redis-server's bind (tests of other packages run beside these): the
	// server then exits at once, and starts again on other ports.
	for attempt := 1; ; attempt++ {
		s.Addr = "127.0.0.1:" + strconv.Itoa(freePort(t))
		if s.opts.TLS != nil {
			s.TLSAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
		}
		if s.admin != nil {
			_ = s.admin.Close()
		}
		s.admin = goredis.NewClient(&goredis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
		out, started := s.launch(t)
		if started {
			return s
		}
		if !strings.Contains(out, "Address already in use") || attempt == 5 {
			t.Fatalf("redis-server exited at start:\n%s", out)
		}
		s.mu.Lock()
		s.output.Reset()
		s.mu.Unlock()
	}
}

// URL is redis://Addr.
func (s *Server) URL() string { return "redis://" + s.Addr }

// TLSURL is rediss://TLSAddr.
func (s *Server) TLSURL() string { return "rediss://" + s.TLSAddr }

// Start starts the stopped server again on its ports, with the data it
// held when it stopped.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if out, started := s.launch(t); !started {
		t.Fatalf("redis-server exited at start:\n%s", out)
	}
}

// launch starts redis-server on the server's ports and waits until it
// answers; when it exits first, launch returns its output and false.
func (s *Server) launch(t testing.TB) (output string, started bool) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{
		"--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
		"--protected-mode", "no", "--dbfilename", "dump.rdb",
	}
	if c := s.opts.TLS; c != nil {
		_, tlsPort, _ := net.SplitHostPort(s.TLSAddr)
		auth := "no"
		if c.RequireClientCert {
			auth = "yes"
		}
		args = append(args, "--tls-port", tlsPort, "--tls-cert-file", c.CertFile, "--tls-key-file", c.KeyFile,
			"--tls-ca-cert-file", c.CAFile, "--tls-auth-clients", auth)
	}
	for _, d := range s.opts.Config {
		name, value, _ := strings.Cut(d, " ")
		args = append(args, "--"+name, value)
	}
	cmd := exec.Command("redis-server", args...)
	s.mu.Lock()
	cmd.Stdout, cmd.Stderr = &lockedWriter{s}, &lockedWriter{s}
	s.mu.Unlock()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v\n%s", err, howToInstall)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.admin.Ping(ctx).Err()
		cancel()
		if err == nil {
			return "", true
		}
		select {
		case <-done:
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.output.String(), false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server does not answer on %s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop saves the server's data and stops it: its ports refuse
// connections until Start.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.admin.Do(ctx, "SHUTDOWN", "SAVE").Err() // the connection closes: no reply
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("redis-server did not stop within 10s of SHUTDOWN SAVE")
	}
}

// kill stops the server without saving, if it runs.
func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Kill()
		<-done
	}
}

// Do runs a command as the default user and returns its reply.
func (s *Server) Do(t testing.TB, args ...any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := s.admin.Do(ctx, args...).Result()
	if err != nil && err != goredis.Nil {
		t.Fatalf("redis %v: %v", args, err)
	}
	return v
}

// AddUser creates the ACL user name with password and rules (like
// "~events:*", "+xadd", "+ping").
func (s *Server) AddUser(t testing.TB, name, password string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + password}
	for _, r := range rules {
		args = append(args, r)
	}
	s.Do(t, args...)
}

// Entry is a stream entry as the server holds it.
type Entry struct {
	// Stream is the stream's name and ID the entry's id.
	Stream, ID string
	// Fields are the entry's fields in their order, names and values.
	Fields [][2]string
}

// Field returns the value of the first field name, and whether there is
// one.
func (e Entry) Field(name string) (string, bool) {
	for _, f := range e.Fields {
		if f[0] == name {
			return f[1], true
		}
	}
	return "", false
}

// Streams returns the names of every stream on the server.
func (s *Server) Streams(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	iter := s.admin.ScanType(ctx, 0, "*", 1000, "stream").Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan streams: %v", err)
	}
	return out
}

// Entries returns every entry of stream, oldest first, fields raw (binary
// values as they are).
func (s *Server) Entries(t testing.TB, stream string) []Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// XRANGE through Do keeps the fields' order and duplicates.
	reply, err := s.admin.Do(ctx, "XRANGE", stream, "-", "+").Slice()
	if err != nil {
		t.Fatalf("XRANGE %q: %v", stream, err)
	}
	out := make([]Entry, 0, len(reply))
	for _, r := range reply {
		pair := r.([]any)
		e := Entry{Stream: stream, ID: pair[0].(string)}
		kv, _ := pair[1].([]any)
		for i := 0; i+1 < len(kv); i += 2 {
			e.Fields = append(e.Fields, [2]string{kv[i].(string), kv[i+1].(string)})
		}
		out = append(out, e)
	}
	return out
}

// AllEntries returns the entries of every stream, each stream's oldest
// first.
func (s *Server) AllEntries(t testing.TB) []Entry {
	t.Helper()
	var out []Entry
	for _, name := range s.Streams(t) {
		out = append(out, s.Entries(t, name)...)
	}
	return out
}

// FlushAll deletes every key.
func (s *Server) FlushAll(t testing.TB) { s.Do(t, "FLUSHALL") }

// freePort returns a loopback port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lockedWriter appends the server's output under its lock.
type lockedWriter struct{ s *Server }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.output.Write(p)
}
