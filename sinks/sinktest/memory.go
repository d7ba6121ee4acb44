package sinktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Memory is a sink that keeps what it is given in memory. It passes the
// conformance suite (with itself as the Destination) and is the test double
// for tests of the relay that need a sink which simply works, records, or
// refuses some messages. The zero value is ready to use.
type Memory struct {
	// Fail, when set, is asked about each message before it is kept: a
	// non-nil error is that message's outcome, and the message is not kept.
	Fail func(m *sinks.Message) error

	mu       sync.Mutex
	received []Received
	broken   bool
}

var (
	_ sinks.Sink  = (*Memory)(nil)
	_ Destination = (*Memory)(nil)
	_ Breaker     = (*Memory)(nil)
)

// errBroken is the outcome of every message while the Memory is broken.
var errBroken = errors.New("memory sink: broken")

// Deliver keeps each message unless Fail refuses it, the sink is broken,
// or ctx has ended (then nothing is kept and each is not attempted).
func (s *Memory) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	if err := ctx.Err(); err != nil {
		return sinks.Fill(errs, fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range msgs {
		m := &msgs[i]
		if s.broken {
			errs[i] = errBroken
			continue
		}
		if s.Fail != nil {
			if errs[i] = s.Fail(m); errs[i] != nil {
				continue
			}
		}
		h := make(map[string][]string, len(m.Headers))
		for k, v := range m.Headers {
			h[k] = []string{v}
		}
		s.received = append(s.received, Received{
			Topic: m.Topic, Payload: append([]byte(nil), m.Payload...), Headers: h, IdempotencyKey: m.IdempotencyKey,
		})
	}
	return errs
}

// Received implements Destination: every message kept, in order.
func (s *Memory) Received(testing.TB) []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// Keys returns the idempotency key of every message kept, in order.
func (s *Memory) Keys() []string {
	var keys []string
	for _, r := range s.Received(nil) {
		keys = append(keys, r.IdempotencyKey)
	}
	return keys
}

// Break implements Breaker: every later message fails (transiently).
func (s *Memory) Break(testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broken = true
}
