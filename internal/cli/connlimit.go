package cli

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit is a listener that keeps at most max connections open, for an
// http.Server whose ConnState hook is its track method. A connection that
// arrives at the cap is never left waiting: it closes the open connection
// that has waited longest without a request in progress (an idle
// keep-alive connection, or one that has sent nothing yet) and takes its
// place, or, when every open connection is in the middle of a request, it
// is closed at once. Requests in progress are never cut, and a client that
// opens connections and sends nothing cannot lock the others out; the
// server's timeouts bound how long a request may hold its connection.
type connLimit struct {
	net.Listener
	max int
	// full, when set, is called at the cap, outside the lock, with
	// whether the new connection replaced a waiting one (else it was
	// closed).
	full func(replaced bool)

	mu    sync.Mutex
	conns map[*limitedConn]struct{}
	peak  int
}

// limitedConn is a connection counted by its connLimit until it closes.
type limitedConn struct {
	net.Conn
	l *connLimit
	// busy (a request is in progress) and since (when the connection last
	// began to wait for a request) are guarded by l.mu.
	busy  bool
	since time.Time
}

// newConnLimit caps ln at limit open connections (at least 1).
func newConnLimit(ln net.Listener, limit int) *connLimit {
	return &connLimit{Listener: ln, max: limit, conns: map[*limitedConn]struct{}{}}
}

// Accept returns the next connection admitted under the cap. The
// connections it turns away are closed here and never reach the server.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, since: time.Now()}
		victim, admitted, atCap := l.admit(lc)
		if victim != nil {
			_ = victim.Conn.Close()
		}
		if atCap && l.full != nil {
			l.full(admitted)
		}
		if admitted {
			return lc, nil
		}
		_ = c.Close()
	}
}

// admit counts c in, making room at the cap by taking out the connection
// that has waited longest without a request (victim, for the caller to
// close); admitted is false when there is none.
func (l *connLimit) admit(c *limitedConn) (victim *limitedConn, admitted, atCap bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		atCap = true
		for o := range l.conns {
			if !o.busy && (victim == nil || o.since.Before(victim.since)) {
				victim = o
			}
		}
		if victim == nil {
			return nil, false, true
		}
		delete(l.conns, victim)
	}
	l.conns[c] = struct{}{}
	l.peak = max(l.peak, len(l.conns))
	return victim, true, atCap
}

// track is the server's ConnState hook: it records whether a connection
// is in the middle of a request, and forgets those the server let go.
func (l *connLimit) track(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateActive:
		c.busy = true
	case http.StateIdle:
		c.busy, c.since = false, time.Now()
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, c)
	}
}

// open returns the connections open now and the most ever open at once.
func (l *connLimit) open() (now, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns), l.peak
}

// Close closes the connection and frees its place.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
