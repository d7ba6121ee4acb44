package sinktest

import (
	"context"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Func is a sink made of functions: the one fake for tests that need a sink
// to block, stall, fail in a particular way or report itself unavailable.
// A nil DeliverFunc delivers everything; a nil AvailableFunc is always
// available.
type Func struct {
	DeliverFunc   func(ctx context.Context, msgs []sinks.Message) []error
	AvailableFunc func() error
}

var (
	_ sinks.Sink         = (*Func)(nil)
	_ sinks.Availability = (*Func)(nil)
)

// Deliver calls DeliverFunc.
func (f *Func) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	if f.DeliverFunc == nil {
		return make([]error, len(msgs))
	}
	return f.DeliverFunc(ctx, msgs)
}

// Available calls AvailableFunc.
func (f *Func) Available() error {
	if f.AvailableFunc == nil {
		return nil
	}
	return f.AvailableFunc()
}
