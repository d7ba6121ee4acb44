package webhook

import (
	"fmt"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Circuit breaker settings: after breakerThreshold consecutive connection
// failures the sink pauses for breakerMinPause, doubling up to
// breakerMaxPause while the first request after each pause fails too.
const (
	breakerThreshold = 5
	breakerMinPause  = time.Second
	breakerMaxPause  = 30 * time.Second
)

// Rate-limit settings: a Retry-After delays its own message only, unless at
// least rateLimitShare of the last rateLimitWindow responses (and at least
// rateLimitMin of them) asked to retry later: then the endpoint is limiting
// every request, and the whole sink pauses.
const (
	rateLimitWindow = 20
	rateLimitMin    = 10
	rateLimitShare  = 0.5
)

// gate decides whether the sink may send now: it holds the pause asked for
// by Retry-After and the circuit breaker's state. It is safe for concurrent
// use.
type gate struct {
	mu     sync.Mutex
	until  time.Time // no request starts before
	reason string    // why, for Available's error

	failures int           // consecutive connection failures
	lastOpen time.Duration // the breaker's last pause; 0 when closed

	// recent records, for the last responses (a ring of rateLimitWindow),
	// whether each asked to retry later.
	recent [rateLimitWindow]bool
	next   int // where the next response goes in recent
	seen   int // responses in recent, up to rateLimitWindow
}

// check returns an error wrapping sinks.ErrNotAttempted while paused.
func (g *gate) check(now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Before(g.until) {
		return fmt.Errorf("%w: webhook paused for %s more (%s)",
			sinks.ErrNotAttempted, g.until.Sub(now).Round(time.Millisecond), g.reason)
	}
	return nil
}

// answered records a response: whether it asked to retry later, after d.
// When most recent responses asked (an endpoint-wide rate limit) it pauses
// the sink until now+d, unless a longer pause is on, and reports whether
// this started a pause (for logging once); a single Retry-After delays its
// own message only.
func (g *gate) answered(now time.Time, askedToWait bool, d time.Duration, status int) (started bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recent[g.next] = askedToWait
	g.next = (g.next + 1) % rateLimitWindow
	g.seen = min(g.seen+1, rateLimitWindow)
	if !askedToWait || d <= 0 || g.seen < rateLimitMin {
		return false
	}
	asked := 0
	for _, a := range g.recent[:g.seen] {
		if a {
			asked++
		}
	}
	if float64(asked) < rateLimitShare*float64(g.seen) {
		return false
	}
	until := now.Add(d)
	if !until.After(g.until) {
		return false
	}
	started = !now.Before(g.until)
	g.until = until
	g.reason = fmt.Sprintf("%d of the last %d responses asked to retry later (the last: %d with Retry-After %s)", asked, g.seen, status, d)
	// The pause answers this episode: count afresh after it.
	g.seen, g.next = 0, 0
	return started
}

// responded records that the endpoint answered (any status), which closes
// the breaker; it reports whether the breaker had been open.
func (g *gate) responded() (recovered bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	recovered = g.lastOpen > 0
	g.failures, g.lastOpen = 0, 0
	return recovered
}

// connectionFailed records a request that got no response (a connection
// error, a failed TLS handshake or a timeout), failing with err. It returns
// the pause when this opened the breaker; the pause's reason quotes err.
func (g *gate) connectionFailed(now time.Time, err error) (pause time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Before(g.until) {
		// A request that started before the pause: the pause already
		// accounts for the outage.
		return 0
	}
	g.failures++
	// After a pause (lastOpen > 0), the first failure opens it again.
	if g.failures < breakerThreshold && g.lastOpen == 0 {
		return 0
	}
	pause = breakerMinPause
	if g.lastOpen > 0 {
		pause = min(2*g.lastOpen, breakerMaxPause)
	}
	g.lastOpen = pause
	g.failures = 0
	g.until = now.Add(pause)
	g.reason = fmt.Sprintf("the endpoint is not responding (connection errors, failed TLS handshakes or timeouts); circuit breaker open for %s; the last error: %v", pause, err)
	return pause
}
