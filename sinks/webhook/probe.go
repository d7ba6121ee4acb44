package webhook

import (
	"net/http"
	"sync"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// After a pause one request, the probe, tests whether the endpoint is back
// (the gate admits it alone). Its message is the one of the batch tried the
// fewest times that has not already failed as a probe in this outage, so
// that probes go round the waiting rows rather than wearing out one of
// them, and a message the endpoint refuses on its own (a 503 for one kind
// of event) cannot hold the sink paused by being probed over and over.
//
// A probe that finds the endpoint still down costs its message an attempt
// only when the failure may be the message's doing: it was sent and got no
// response, a 5xx other than 503, or another failure. When it was not sent
// at all (the connection or the TLS handshake failed) or the endpoint
// answered 503 or 429, it says nothing about the message: it is reported
// not attempted, and the row waits without spending an attempt.

// probedMax bounds the keys of the messages remembered as failed probes.
const probedMax = 64

// probed remembers the idempotency keys of the messages whose probe found
// the endpoint down, until it is back. It is safe for concurrent use.
type probed struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// add remembers key, unless probedMax keys are remembered already.
func (p *probed) add(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		p.keys = map[string]struct{}{}
	}
	if len(p.keys) < probedMax {
		p.keys[key] = struct{}{}
	}
}

// clear forgets every key: the endpoint is back.
func (p *probed) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = nil
}

// has reports whether key is remembered.
func (p *probed) has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.keys[key]
	return ok
}

// order returns the order in which msgs are sent: as given, except that
// when the gate waits for a probe (probeDue), the message that should probe
// comes first: the one tried the fewest times among those that have not
// failed as a probe in this outage (among all, when every one has), the
// first of them on a tie. Messages of one call are sent concurrently
// anyway: their order is no promise.
func (p *probed) order(msgs []sinks.Message, probeDue bool) []int {
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
	}
	if !probeDue || len(msgs) < 2 {
		return order
	}
	best, bestProbed := 0, p.has(msgs[0].IdempotencyKey)
	for i := 1; i < len(msgs); i++ {
		isProbed := p.has(msgs[i].IdempotencyKey)
		switch {
		case bestProbed && !isProbed,
			bestProbed == isProbed && msgs[i].Attempt < msgs[best].Attempt:
			best, bestProbed = i, isProbed
		}
	}
	copy(order[1:best+1], order[:best])
	order[0] = best
	return order
}

// probeFailureIsFree reports whether a probe's failure says nothing about
// its message: it got no response (status 0) and was not sent, or the
// endpoint answered that it is unavailable (503) or limiting requests
// (429).
func probeFailureIsFree(sent bool, status int) bool {
	if status == 0 {
		return !sent
	}
	return status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests
}
