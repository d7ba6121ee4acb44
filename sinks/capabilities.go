package sinks

import "context"

// The optional capabilities of a sink. The relay and the CLI look for them
// with a type assertion; a sink implements those that make sense for its
// destination.

// Availability is implemented by sinks that know when they cannot deliver at
// all: disconnected, paused by the destination, blocked by a broker alarm.
//
// Available returns nil when the sink can take deliveries now, else an error
// wrapping ErrNotAttempted that says why. The relay calls it before every
// claim, so it must be cheap and must not block. While it returns an error
// the relay claims no rows for the sink (they wait in the table without
// spending attempts), reports the sink unavailable in /readyz and in
// outbox_relay_sink_available, and goes on with the other sinks.
type Availability interface {
	Available() error
}

// StartupChecker is implemented by sinks that can check, once at start, that
// the destination is set up to take their messages: a JetStream stream that
// captures the subjects, a Kafka topic, a RabbitMQ exchange.
//
// CheckStartup runs in the background while the relay already delivers; it
// may wait for the destination to become reachable, until ctx ends. It
// returns the problems it found (none when all is well); the CLI logs each
// at warn level and sets outbox_relay_sink_problem{sink,problem} to 1. An
// error means the check could not be made; it is logged, not fatal.
type StartupChecker interface {
	CheckStartup(ctx context.Context) ([]Problem, error)
}

// Problem is something a start-up check found wrong with the destination's
// setup. Deliveries go on: a problem may explain why they fail.
type Problem struct {
	// Code names the problem in metrics: a short snake_case word such as
	// no_stream.
	Code string
	// Message says what is wrong and how to fix it, in a sentence.
	Message string
	// Attrs are slog attributes (key, value pairs) that go with Message.
	Attrs []any
}

// A sink that holds connections implements io.Closer: the CLI closes it
// after the relay has drained.

// Streamer is implemented by sinks whose messages finish one by one rather
// than as a batch (a webhook's requests): the relay writes each outcome
// down as it arrives, so that one slow message does not hold back the
// others' settles, nor the next rows of their keys.
//
// DeliverStream delivers msgs as Deliver does and calls report exactly once
// per message, with its index in msgs and its outcome, as soon as it is
// known; report may be called from several goroutines at once. It returns
// when every message has been reported.
type Streamer interface {
	DeliverStream(ctx context.Context, msgs []Message, report func(i int, err error))
}
