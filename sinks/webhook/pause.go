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

// gate decides whether the sink may send now: it holds the pause asked for
// by Retry-After and the circuit breaker's state. It is safe for concurrent
// use.
type gate struct {
	mu     sync.Mutex
	until  time.Time // no request starts before
	reason string    // why, for Available's error

	failures int           // consecutive connection failures
	lastOpen time.Duration // the breaker's last pause; 0 when closed
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

// retryAfter pauses until now+d, unless a longer pause is on, and reports
// whether this started a pause (for logging once).
func (g *gate) retryAfter(now time.Time, d time.Duration, status int) (started bool) {
	if d <= 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	until := now.Add(d)
	if !until.After(g.until) {
		return false
	}
	started = !now.Before(g.until)
	g.until = until
	g.reason = fmt.Sprintf("the endpoint responded %d with Retry-After %s", status, d)
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
// error or a timeout). It returns the pause when this opened the breaker.
func (g *gate) connectionFailed(now time.Time) (pause time.Duration) {
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
	g.reason = fmt.Sprintf("the endpoint is not responding (connection errors or timeouts); circuit breaker open for %s", pause)
	return pause
}
