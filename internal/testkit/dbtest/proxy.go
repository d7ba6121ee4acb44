package dbtest

import (
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Proxy is a TCP proxy in front of the test database that a test can make
// stop answering without closing a connection, as a network partition or a
// hung middlebox does (Hold), and answer again (Resume). It closes at the
// test's cleanup.
type Proxy struct {
	// URL is the database's connection string (Schema.URL) through the
	// proxy.
	URL string

	ln       net.Listener
	upstream string

	mu     sync.Mutex
	open   chan struct{} // closed while the proxy forwards
	conns  map[net.Conn]struct{}
	closed bool
}

// Proxy starts a proxy in front of s's database, forwarding.
func (s *Schema) Proxy(t testing.TB) *Proxy {
	t.Helper()
	cfg, err := pgconn.ParseConfig(s.URL)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL is not a valid connection string: %v", err)
	}
	u, err := url.Parse(s.URL)
	if err != nil || u.Host == "" {
		t.Fatalf("a proxy needs TEST_DATABASE_URL as a URL (postgres://host:port/…), not %s", redact(s.URL))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = ln.Addr().String()
	p := &Proxy{URL: u.String(), ln: ln, upstream: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))),
		open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.open)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Hold stops forwarding: connections stay open, and what either side
// sends, a new connection included, goes unanswered until Resume.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// Resume forwards again, what was held first.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// gate returns a channel closed while the proxy forwards.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// track records c to be closed with the proxy; false when it is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			_ = client.Close()
			return
		}
		go func() {
			<-p.gate()
			server, err := net.Dial("tcp", p.upstream)
			if err != nil || !p.track(server) {
				_ = client.Close()
				return
			}
			go p.forward(server, client)
			p.forward(client, server)
		}()
	}
}

// forward copies from src to dst while the proxy forwards, then closes
// both.
func (p *Proxy) forward(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF or a closed connection
		}
	}
}

// close closes the listener and every connection, and lets go of what was
// held.
func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Resume()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
}
