// Package sinks defines what the relay asks of a destination: take a batch
// of messages and report one outcome per message.
//
// An outcome is an error: nil means the destination durably accepted the
// message (a JetStream PubAck, a 2xx response); an error wrapped with
// Permanent means it never will, so the row goes to the dead letters at once;
// an error wrapping ErrNotAttempted puts the row back without counting an
// attempt; any other error is transient and the row is retried with backoff,
// not sooner than a delay given with RetryAfter.
//
// A sink that knows when it cannot deliver at all (disconnected, paused by
// the destination) also implements Available() error; the relay then leaves
// its rows in the table instead of claiming them.
//
// Each destination lives in its own sub-package (sinks/nats,
// sinks/webhook) and asserts var _ sinks.Sink = (*Sink)(nil).
package sinks

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Sink delivers messages to one destination. Deliver is called from several
// goroutines at once.
type Sink interface {
	// Deliver sends msgs and returns one error per message, in the same order:
	// nil once the destination has durably accepted that message. It returns
	// by the context's deadline, reporting what it could not finish as
	// transient errors; it never reports a message delivered that it is not
	// sure of.
	Deliver(ctx context.Context, msgs []Message) []error
}

// Message is a claimed outbox row on its way to a sink.
type Message struct {
	outbox.Message
	// ID is the row's id in the outbox table.
	ID int64
	// CreatedAt is when the row was inserted.
	CreatedAt time.Time
	// Attempt counts deliveries of this row, starting at 1.
	Attempt int
}

// Fill sets every element of errs to err and returns errs: the outcome of a
// batch that failed as a whole.
func Fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
