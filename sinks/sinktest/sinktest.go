// Package sinktest is the conformance suite every sink passes: payloads byte
// for byte, headers passed through, a stable idempotency key, one outcome per
// message in order, context cancellation, concurrent use, and never a
// message reported delivered that the destination does not have.
//
// A sink's own tests call Run with a Harness that creates the sink and a view
// of its destination (a real in-process server: an httptest server, a NATS
// server). Failure classification is specific to each destination and stays
// in each sink's own tests. The package is imported only from _test files.
package sinktest

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Harness tells the suite how to set up a sink and observe its destination.
type Harness struct {
	// New returns a fresh sink and its own destination, both cleaned up with
	// t. It is called once per subtest (subtests run in parallel), and once
	// per fuzz target by FuzzHostile, with the *testing.F.
	New func(t testing.TB) (sinks.Sink, Destination)
	// Reject, when set, changes m so that it fails permanently (the
	// destination or the sink refuses it for good), for checking that
	// outcomes line up with their messages.
	Reject func(m *sinks.Message)
	// Features says what the destination can do; the suite checks what it
	// claims and leaves out what it lacks.
	Features Features
}

// Features describes a destination for the suite.
type Features struct {
	// Headers is set when the destination carries row headers (NATS and
	// HTTP headers, Kafka record headers, AMQP headers).
	Headers bool
	// DedupsByKey is set when the destination itself drops a copy of a
	// message whose idempotency key it already holds (JetStream, within its
	// duplicate window); otherwise it is expected to keep both copies.
	DedupsByKey bool
	// Outage is set when the Destination implements Breaker, so that the
	// suite can check that nothing is reported delivered while the
	// destination accepts nothing.
	Outage bool
	// EveryTopic is set when the Destination sees every topic under Topic
	// (a stream or subscription capturing the prefix, one webhook URL):
	// the hostile-row suite then checks that a hostile topic reported
	// delivered arrived as sent.
	EveryTopic bool
}

// Destination is the far end of a sink, as the suite observes it.
type Destination interface {
	// Received returns the messages the destination has durably accepted so
	// far (stored in a stream, answered with a 2xx, handed to a subscriber),
	// in the order it accepted them. A duplicate it kept twice appears twice.
	Received(t testing.TB) []Received
}

// Breaker is implemented by a Destination that can be made to accept
// nothing more: stopped, unreachable, or refusing every message
// (Features.Outage).
type Breaker interface {
	// Break makes the destination accept no message from now on.
	Break(t testing.TB)
}

// Purger is implemented by a Destination that can forget what it has
// received. FuzzHostile purges its one destination before each input, so
// that a long run does not read an ever longer history at every check.
type Purger interface {
	// Purge drops every message received so far: Received returns only
	// later ones.
	Purge(t testing.TB)
}

// Received is one message as the destination saw it.
type Received struct {
	// Topic is the message's topic as the destination carries it (for NATS
	// the subject without the configured prefix).
	Topic string
	// Payload is the body, byte for byte.
	Payload []byte
	// Headers are the headers that arrived, names as the destination saw
	// them; the suite compares names without regard to case.
	Headers map[string][]string
	// IdempotencyKey is the key as the destination saw it (Nats-Msg-Id,
	// webhook-id).
	IdempotencyKey string
}
