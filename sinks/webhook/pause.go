package webhook

import (
	"fmt"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Circuit breaker settings: after breakerThreshold consecutive requests
// that found the endpoint down the sink pauses for breakerMinPause; after
// each pause one request probes the endpoint, and while the probe finds it
// down too the next pause doubles, up to breakerMaxPause.
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

// signal is what the result of one request says about the endpoint.
type signal uint8

const (
	// signalUp: the endpoint handled the request: 2xx, or a failure that
	// is the message's own (4xx, 3xx).
	signalUp signal = iota
	// signalDown: the endpoint is down: no response (a connection error,
	// a failed TLS handshake, a timeout) or a 5xx without Retry-After.
	signalDown
	// signalWait: the endpoint asked to retry later (Retry-After).
	signalWait
	// signalNone: the caller's context ended first: nothing learnt.
	signalNone
)

// result is what the gate needs of a request's result.
type result struct {
	sig        signal
	status     int           // the response's status; 0 without one
	retryAfter time.Duration // signalWait: the delay asked for
	err        error         // the failure, for the pause's reason
}

// ticket is a request's admission by the gate.
type ticket struct {
	// epoch is the number of pauses begun when the request started: one
	// that ends after another pause began is stale.
	epoch uint64
	// probe says the request tests the endpoint after a pause: it is the
	// only one in flight until its result is in.
	probe bool
}

// verdict is what the gate made of a request's result.
type verdict struct {
	// stale: a pause began while the request was in flight. The pause
	// answers the outage; the request's failure is no reason to count an
	// attempt of its message.
	stale bool
	// pause is the pause this result began, 0 if none; reopened says it
	// follows a probe that found the endpoint still down.
	pause    time.Duration
	reopened bool
	// recovered: the endpoint answers again after a pause.
	recovered bool
}

// gate decides whether the sink may send now: it holds the pause asked for
// by Retry-After and the circuit breaker's state, and lets one request
// probe the endpoint after each pause. It is safe for concurrent use.
type gate struct {
	mu     sync.Mutex
	until  time.Time // no request starts before
	reason string    // why, for Available's error
	epoch  uint64    // pauses begun so far

	failures int           // consecutive requests that found the endpoint down
	lastOpen time.Duration // the last pause; 0 once a request found the endpoint up
	probing  chan struct{} // while a probe is in flight; closed when its result is in

	// recent records, for the last responses (a ring of rateLimitWindow),
	// whether each asked to retry later.
	recent [rateLimitWindow]bool
	next   int // where the next response goes in recent
	seen   int // responses in recent, up to rateLimitWindow
}

// check returns an error wrapping sinks.ErrNotAttempted while paused or
// while a probe is in flight: no batch should be handed to the sink then.
func (g *gate) check(now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.pausedLocked(now); err != nil {
		return err
	}
	if g.probing != nil {
		return fmt.Errorf("%w: webhook paused while one request probes whether the endpoint is back (%s)", sinks.ErrNotAttempted, g.reason)
	}
	return nil
}

// paused returns an error wrapping sinks.ErrNotAttempted while paused.
func (g *gate) paused(now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pausedLocked(now)
}

func (g *gate) pausedLocked(now time.Time) error {
	if now.Before(g.until) {
		return fmt.Errorf("%w: webhook paused for %s more (%s)",
			sinks.ErrNotAttempted, g.until.Sub(now).Round(time.Millisecond), g.reason)
	}
	return nil
}

// probeDue reports whether the next request admitted will probe the
// endpoint: a pause began, and no request has found the endpoint up since.
func (g *gate) probeDue() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastOpen > 0
}

// admit admits a request that starts now. After a pause, until a request
// finds the endpoint up, the request admitted is the probe; while the
// probe is in flight, admit returns a channel closed when its result is in
// (wait for it and ask again). It returns an error wrapping
// sinks.ErrNotAttempted while paused.
func (g *gate) admit(now time.Time) (t ticket, probing <-chan struct{}, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.pausedLocked(now); err != nil {
		return ticket{}, nil, err
	}
	if g.probing != nil {
		return ticket{}, g.probing, nil
	}
	t = ticket{epoch: g.epoch}
	if g.lastOpen > 0 {
		t.probe = true
		g.probing = make(chan struct{})
	}
	return t, nil, nil
}

// done records the result r of the request admitted with t, and returns
// what it made of it. Every admitted request must be done once.
func (g *gate) done(t ticket, now time.Time, r result) (v verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.probe {
		close(g.probing)
		g.probing = nil
	}
	switch {
	case r.sig == signalNone:
		// Interrupted by the caller: the next request probes instead.
		return v
	case r.sig == signalUp:
		g.record(false)
		g.failures = 0
		v.recovered = g.lastOpen > 0
		g.lastOpen = 0
		return v
	case t.epoch != g.epoch:
		v.stale = true
		return v
	}
	if r.status != 0 {
		g.record(r.sig == signalWait)
	}
	if t.probe {
		// Still down: pause again, for longer.
		v.reopened = true
		v.pause = g.open(now, r, "the probe after the last pause failed too")
		return v
	}
	if r.sig == signalDown {
		g.failures++
		if g.failures >= breakerThreshold {
			v.pause = g.open(now, r, fmt.Sprintf("%d requests in a row got no response or a 5xx", breakerThreshold))
		}
		return v
	}
	// signalWait: a pause when most recent responses asked to wait.
	if r.retryAfter <= 0 || g.seen < rateLimitMin {
		return v
	}
	asked := 0
	for _, a := range g.recent[:g.seen] {
		if a {
			asked++
		}
	}
	if float64(asked) < rateLimitShare*float64(g.seen) {
		return v
	}
	v.pause = r.retryAfter
	g.pause(now, r.retryAfter, fmt.Sprintf("%d of the last %d responses asked to retry later (the last: %d with Retry-After %s); then one request probes the endpoint",
		asked, g.seen, r.status, r.retryAfter))
	return v
}

// record adds a response to recent: whether it asked to retry later.
func (g *gate) record(askedToWait bool) {
	g.recent[g.next] = askedToWait
	g.next = (g.next + 1) % rateLimitWindow
	g.seen = min(g.seen+1, rateLimitWindow)
}

// open opens the circuit breaker for r, which found the endpoint down
// (why says how it shows): for breakerMinPause, or twice the last pause up
// to breakerMaxPause, or longer when r asked to retry later. It returns
// the pause; its reason quotes r's error.
func (g *gate) open(now time.Time, r result, why string) time.Duration {
	p := breakerMinPause
	if g.lastOpen > 0 {
		p = min(2*g.lastOpen, breakerMaxPause)
	}
	p = max(p, r.retryAfter)
	g.pause(now, p, fmt.Sprintf("the endpoint is down: %s; circuit breaker open for %s, then one request probes the endpoint; the last error: %v", why, p, r.err))
	return p
}

// pause pauses the sink for p from now, for reason: a new epoch, in which
// the first request probes the endpoint.
func (g *gate) pause(now time.Time, p time.Duration, reason string) {
	g.until = now.Add(p)
	g.reason = reason
	g.epoch++
	g.lastOpen = p
	g.failures = 0
	// The pause answers this episode: count afresh after it.
	g.seen, g.next = 0, 0
}
