package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// A sink that is connected but delivers nothing (a hung broker: every
// acknowledgement times out) makes the relay not ready, with the reason;
// the first delivery that goes through makes it ready again.
func TestRelay_AConnectedSinkThatDeliversNothingIsNotReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var hung atomic.Bool
	hung.Store(true)
	sink := &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
		if hung.Load() {
			return sinks.Fill(make([]error, len(msgs)), errors.New("await ack: nats: timeout"))
		}
		return make([]error, len(msgs))
	}}
	cfg := b.config(t)
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	cfg.StallAfter = time.Second
	cfg.BackoffMin, cfg.BackoffMax = 100*time.Millisecond, 100*time.Millisecond
	r, _ := relaytest.Start(t, b.db.Pool, cfg)
	relaytest.InsertRows(t, b.db, 10, "events.a")
	waitfor.Condition(t, 30*time.Second, "readiness to report the stalled sink", func() bool {
		err := r.Ready(context.Background())
		return err != nil && strings.Contains(err.Error(), "sink nats: connected but no delivery succeeded") && strings.Contains(err.Error(), "nats: timeout")
	})
	hung.Store(false)
	waitfor.Condition(t, 30*time.Second, "the relay to be ready again", func() bool { return r.Ready(context.Background()) == nil })
	relaytest.WaitDrained(t, b.db, 30*time.Second)
}
