package cli

import (
	"bufio"
	"context"
	"errors"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// startEndpoint serves the endpoint on a free loopback port with limits,
// logging JSON to the returned buffer, until the test ends.
func startEndpoint(t *testing.T, limits endpointLimits) (*endpoint, *testlog.Buffer) {
	t.Helper()
	ep, err := listen("127.0.0.1:0", limits)
	if err != nil {
		t.Fatal(err)
	}
	log, logs := testlog.NewJSON(t, slog.LevelInfo)
	ep.serve(prometheus.NewRegistry(), log)
	t.Cleanup(ep.stop)
	return ep, logs
}

// dialSilent opens n connections to addr that send nothing, closed at
// cleanup.
func dialSilent(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d of %d: %v", len(conns)+1, n, err)
		}
		conns = append(conns, c)
	}
	return conns
}

// closedByPeer reports whether the server has closed c: a read that ends
// otherwise than by its (short) deadline. A connection it reports closed
// is closed for good.
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// stillOpen counts the connections of conns the server has not closed,
// remembering in closed those it has.
func stillOpen(conns []net.Conn, closed map[net.Conn]bool) int {
	n := 0
	for _, c := range conns {
		if !closed[c] {
			if closedByPeer(c) {
				closed[c] = true
				continue
			}
			n++
		}
	}
	return n
}

// waitClosed waits, up to timeout, for the server to close c: the read
// must end by an end of file or a reset, never by its deadline.
func waitClosed(t *testing.T, c net.Conn, timeout time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the endpoint kept the connection open for %s", timeout)
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v", err)
	}
}

// newClient returns a client of its own (its connections are not shared
// with other tests), closed at cleanup.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func getWith(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Many clients that connect and send nothing, as the ~14,500 keep-alive
// connections that once OOM-killed a relay did, hold at most the cap: each
// new connection closes the one that has waited longest, and the endpoint
// answers at once all along. The timeouts are long here, so that only the
// cap closes anything.
func TestEndpoint_ManyIdleConnectionsStayUnderTheCap(t *testing.T) {
	t.Parallel()
	const limit = 8
	ep, logs := startEndpoint(t, endpointLimits{MaxConns: limit, ReadHeaderTimeout: time.Hour, IdleTimeout: time.Hour})
	addr := ep.addr().String()
	conns := dialSilent(t, addr, 200)

	client := newClient(t)
	for range 5 {
		if code, body := getWith(t, client, "http://"+addr+"/livez"); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("/livez = %d %q with 200 silent connections opened", code, body)
		}
	}
	closed := map[net.Conn]bool{}
	waitfor.Condition(t, 10*time.Second, "the silent connections above the cap to be closed", func() bool {
		return stillOpen(conns, closed) <= limit
	})
	// Closed by the cap, not by a timeout: the latest ones are open.
	if open := stillOpen(conns, closed); open == 0 {
		t.Error("every silent connection was closed; want the latest ones, under the cap, left open")
	}
	// Keep-alive connections that made a request and wait for the next
	// are replaced in turn as well.
	for range 3 * limit {
		if code, _ := getWith(t, newClient(t), "http://"+addr+"/metrics"); code != http.StatusOK {
			t.Fatalf("/metrics = %d", code)
		}
	}
	if code, _ := getWith(t, client, "http://"+addr+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d, want 503 (starting)", code)
	}
	if now, peak := ep.ln.open(); now > limit || peak > limit {
		t.Errorf("the endpoint holds %d connections and held up to %d; the cap is %d", now, peak, limit)
	}
	if lines := logs.Lines("connection cap"); len(lines) != 1 || !strings.Contains(lines[0], `"level":"WARN"`) ||
		!strings.Contains(lines[0], `"max_connections":8`) || !strings.Contains(lines[0], "RELAY_HTTP_MAX_CONNECTIONS") {
		t.Errorf("want one warning naming the cap and its variable (at most one a minute), got %q", lines)
	}
}

// While every connection under the cap is in the middle of a request, a
// new one is closed at once, not left hanging; the requests in progress
// are answered; then the endpoint takes connections again.
func TestEndpoint_AtTheCapWithEveryConnectionBusyANewOneIsClosedAtOnce(t *testing.T) {
	t.Parallel()
	const limit = 4
	ep, _ := startEndpoint(t, endpointLimits{MaxConns: limit})
	addr := ep.addr().String()
	release := make(chan struct{})
	var inReadyz atomic.Int32
	ep.setReady(func(ctx context.Context) error {
		inReadyz.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	busy := dialSilent(t, addr, limit)
	for _, c := range busy {
		if _, err := io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: relay\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.Condition(t, 10*time.Second, "every connection to be in /readyz", func() bool { return inReadyz.Load() == limit })

	extra := dialSilent(t, addr, 1)[0]
	start := time.Now()
	waitClosed(t, extra, 20*time.Second)
	t.Logf("the connection above the cap was closed after %s", time.Since(start))

	close(release)
	for i, c := range busy {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("request %d in progress at the cap: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("request %d in progress at the cap: %d", i, resp.StatusCode)
		}
	}
	// They now wait for their next request: a new connection replaces one.
	if code, _ := getWith(t, newClient(t), "http://"+addr+"/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d after the busy connections went idle", code)
	}
	if _, peak := ep.ln.open(); peak > limit {
		t.Errorf("the endpoint held %d connections; the cap is %d", peak, limit)
	}
}

// A keep-alive connection is closed once it has waited IdleTimeout for its
// next request; a connection that sends nothing, or only part of its
// headers, once ReadHeaderTimeout has passed.
func TestEndpoint_ClosesIdleAndSlowConnections(t *testing.T) {
	t.Parallel()
	const idle, header = 300 * time.Millisecond, 500 * time.Millisecond
	ep, _ := startEndpoint(t, endpointLimits{IdleTimeout: idle, ReadHeaderTimeout: header})
	addr := ep.addr().String()

	t.Run("idle keep-alive", func(t *testing.T) {
		t.Parallel()
		c := dialSilent(t, addr, 1)[0]
		sent := time.Now()
		if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: relay\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("/livez = %d, close %v: want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the idle connection: %v, want it closed", err)
		}
		// The server starts the idle timeout once it has answered, after
		// the request was sent.
		if waited := time.Since(sent); waited < idle {
			t.Errorf("the idle connection was closed %s after its request, before its idle timeout (%s)", waited, idle)
		}
	})
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		start := time.Now() // before the server accepts the connection
		waitClosed(t, dialSilent(t, addr, 1)[0], 20*time.Second)
		if waited := time.Since(start); waited < header {
			t.Errorf("the silent connection was closed after %s, before the header timeout (%s)", waited, header)
		}
	})
	t.Run("partial headers", func(t *testing.T) {
		t.Parallel()
		c := dialSilent(t, addr, 1)[0]
		if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: relay\r\n"); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, c, 20*time.Second)
	})
}

// Headers larger than the endpoint's bound are refused (431), not read.
func TestEndpoint_RefusesLargeHeaders(t *testing.T) {
	t.Parallel()
	ep, _ := startEndpoint(t, endpointLimits{})
	req, err := http.NewRequest(http.MethodGet, "http://"+ep.addr().String()+"/livez", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("x", 2*endpointMaxHeaderBytesDefault))
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("/livez with %d bytes of headers = %d, want 431", 2*endpointMaxHeaderBytesDefault, resp.StatusCode)
	}
}

// The defaults are the documented ones (docs/security.md, Endpoints), and
// RELAY_HTTP_MAX_CONNECTIONS's default is the endpoint's.
func TestEndpoint_DefaultLimits(t *testing.T) {
	t.Parallel()
	ep, _ := startEndpoint(t, endpointLimits{})
	srv := ep.srv
	if srv.ReadHeaderTimeout != 5*time.Second || srv.ReadTimeout != 10*time.Second || srv.WriteTimeout != 30*time.Second ||
		srv.IdleTimeout != 60*time.Second || srv.MaxHeaderBytes != 16<<10 || ep.ln.max != 256 {
		t.Errorf("read header %s, read %s, write %s, idle %s, header bytes %d, connections %d: want 5s, 10s, 30s, 1m, 16 KiB, 256",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes, ep.ln.max)
	}
	s := mustSettings(t, []string{"DATABASE_URL=postgres://x@127.0.0.1/db", "NATS_URL=nats://127.0.0.1:4222"})
	if s.HTTPMaxConnections != endpointMaxConnsDefault {
		t.Errorf("RELAY_HTTP_MAX_CONNECTIONS unset gives %d, want the endpoint's default %d", s.HTTPMaxConnections, endpointMaxConnsDefault)
	}
	for _, v := range []string{"0", "-1", "65537", "many"} {
		if _, err := loadConfig([]string{"RELAY_HTTP_MAX_CONNECTIONS=" + v}); err == nil || !strings.Contains(err.Error(), "RELAY_HTTP_MAX_CONNECTIONS") {
			t.Errorf("RELAY_HTTP_MAX_CONNECTIONS=%s: %v, want refused", v, err)
		}
	}
}

func TestWarnExposedEndpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ip         string
		kubernetes bool
		warn       bool
	}{
		{"127.0.0.1", false, false},
		{"127.0.0.2", false, false},
		{"::1", false, false},
		{"0.0.0.0", false, true},
		{"::", false, true},
		{"192.0.2.10", false, true},
		{"0.0.0.0", true, false},
		{"::", true, false},
	} {
		log, logs := testlog.NewJSON(t, slog.LevelInfo)
		environ := []string{"PATH=/usr/bin"}
		if c.kubernetes {
			environ = append(environ, "KUBERNETES_SERVICE_HOST=10.96.0.1")
		}
		addr := &net.TCPAddr{IP: net.ParseIP(c.ip), Port: 8461}
		warnExposedEndpoint(log, addr, environ)
		lines := logs.Lines("no authentication")
		if c.warn && (len(lines) != 1 || !strings.Contains(lines[0], `"level":"WARN"`) || !strings.Contains(lines[0], "RELAY_HTTP_ADDR")) {
			t.Errorf("%s, Kubernetes %v: want one warning naming RELAY_HTTP_ADDR, got %q", addr, c.kubernetes, lines)
		}
		if !c.warn && len(lines) != 0 {
			t.Errorf("%s, Kubernetes %v: want no warning, got %q", addr, c.kubernetes, lines)
		}
	}
}

// processEndpointEnv is a configuration that runs the binary's endpoint
// without a database or a sink answering: the relay waits for its
// database, the endpoint serves.
func processEndpointEnv(extra ...string) []string {
	return append([]string{
		"DATABASE_URL=postgres://relay@127.0.0.1:1/app?sslmode=disable",
		"WEBHOOK_URL=http://127.0.0.1:1/hook", "WEBHOOK_SECRET=" + testSecret,
	}, extra...)
}

// RELAY_HTTP_MAX_CONNECTIONS, set on the binary, caps the connections its
// endpoint holds while it answers.
func TestProcess_EndpointConnectionCap(t *testing.T) {
	t.Parallel()
	p := startProcess(t, processEndpointEnv("RELAY_HTTP_MAX_CONNECTIONS=4")...)
	p.waitLog(`"serving /metrics`)
	conns := dialSilent(t, p.addr, 40)
	closed := map[net.Conn]bool{}
	waitfor.Condition(t, 10*time.Second, "the connections above RELAY_HTTP_MAX_CONNECTIONS to be closed", func() bool {
		return stillOpen(conns, closed) <= 4
	})
	if code, _ := getWith(t, newClient(t), "http://"+p.addr+"/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d with 40 silent connections opened", code)
	}
	p.waitLog("at its connection cap")
	for _, l := range p.log() {
		if strings.Contains(l, "at its connection cap") && !strings.Contains(l, `"max_connections":4`) {
			t.Errorf("the cap's warning does not name RELAY_HTTP_MAX_CONNECTIONS's value: %s", l)
		}
	}
}

// The binary warns once at start when its endpoint listens beyond
// loopback outside Kubernetes, and not in Kubernetes nor on loopback.
func TestProcess_WarnsWhenTheEndpointIsExposed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  []string
		warn bool
	}{
		{"all interfaces", []string{"RELAY_HTTP_ADDR=:0"}, true},
		{"all interfaces in Kubernetes", []string{"RELAY_HTTP_ADDR=:0", "KUBERNETES_SERVICE_HOST=10.96.0.1"}, false},
		{"loopback", []string{"RELAY_HTTP_ADDR=127.0.0.1:0"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := startProcess(t, processEndpointEnv(c.env...)...)
			// Logged after the warning, by the same goroutine.
			p.waitLog("cannot reach the database")
			var warnings []string
			for _, l := range p.log() {
				if strings.Contains(l, "no authentication") {
					warnings = append(warnings, l)
				}
			}
			if c.warn && (len(warnings) != 1 || !strings.Contains(warnings[0], `"level":"WARN"`)) {
				t.Errorf("want one warning, got %q", warnings)
			}
			if !c.warn && len(warnings) != 0 {
				t.Errorf("want no warning, got %q", warnings)
			}
		})
	}
}
