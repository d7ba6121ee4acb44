package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// pausedOnceSink is a streaming sink whose first send declines its first
// message while paused (as the webhook's circuit breaker does), and whose
// pause ends while the rest of that send goes on.
type pausedOnceSink struct {
	paused atomic.Bool
	sends  atomic.Int32
}

var (
	_ sinks.Streamer     = (*pausedOnceSink)(nil)
	_ sinks.Availability = (*pausedOnceSink)(nil)
)

var errPaused = fmt.Errorf("%w: paused", sinks.ErrNotAttempted)

func (s *pausedOnceSink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	s.DeliverStream(ctx, msgs, func(i int, err error) { errs[i] = err })
	return errs
}

func (s *pausedOnceSink) DeliverStream(_ context.Context, msgs []sinks.Message, report func(int, error)) {
	first := 0
	if s.sends.Add(1) == 1 {
		s.paused.Store(true)
		report(0, errPaused)
		s.paused.Store(false)
		first = 1
	}
	for k := first; k < len(msgs); k++ {
		report(k, nil)
	}
}

func (s *pausedOnceSink) Available() error {
	if s.paused.Load() {
		return errPaused
	}
	return nil
}

// TestDelivery_RowsDeclinedWhileTheSinkWasPausedGoAgainOnceItIsBack: a
// message the sink did not attempt because it was paused is sent again
// once the sink is available, even when the pause ended before the send
// did; it was released for RELAY_BACKOFF_MIN, as if the sink had declined
// it while available (the webhook's breaker pauses a second; a send of a
// few hundred requests lasts longer, and the rows waited an hour in
// TestProcess_OrderedRowsWithoutAKeyAreNeverHeldUp).
func TestDelivery_RowsDeclinedWhileTheSinkWasPausedGoAgainOnceItIsBack(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	relaytest.InsertRows(t, db, 10, "events.a")
	relaytest.Start(t, db.Pool, relay.Config{
		Schema: db.Name, Sinks: map[string]sinks.Sink{"paused-once": &pausedOnceSink{}},
		PollInterval: 10 * time.Millisecond, BackoffMin: time.Hour, BackoffMax: time.Hour,
		Logger: testLogger(t), Metrics: relay.NewMetrics(),
	})
	relaytest.WaitDrained(t, db, 10*time.Second)
}
