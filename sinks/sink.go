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
