package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// sinkDelivery is one sink's share of a claimed batch on its way: the messages
// and the tags of the claims that leased them, the sink, the deadline
// (before the lease ends), the observers of its sends, and where its
// outcomes go. A mode sends it all at once (all) or in waves (each, with
// an observer of its own in also).
type sinkDelivery struct {
	cfg      *Config
	name     string
	sink     sinks.Sink
	msgs     []sinks.Message
	tags     []claimTag
	deadline time.Time
	// observers make the observers of each send (observe.go), the last of
	// which passes the outcomes to settle; also are observers the mode
	// adds, which learn every outcome, releases included, by message
	// index.
	observers *sinkObservers
	also      []observer
	settle    chan<- []rowOutcome
}

// sendAll sends every message of d as one delivery.
func (d *sinkDelivery) sendAll(ctx context.Context) {
	pending := make([]int, len(d.msgs))
	for i := range pending {
		pending[i] = i
	}
	d.sendEach(ctx, pending)
}

// sendEach sends the messages at indexes pending as one delivery and passes
// every outcome to the settlers. Messages the sink did not attempt are sent
// again once it is available, while the deadline allows, and released
// otherwise.
func (d *sinkDelivery) sendEach(ctx context.Context, pending []int) {
	for len(pending) > 0 {
		pending = d.againOrRelease(ctx, d.sendWithin(ctx, pending, nil))
	}
}

// declined is what a send returns of the messages its sink did not
// attempt: their indexes, and whether the sink was unavailable when it
// declined one of them (it said so as it reported the message).
type declined struct {
	rows        []int
	unavailable bool
}

// againOrRelease takes the messages the sink did not attempt: it returns
// them to be sent again once the sink is available again in time, and
// releases them (returning none) otherwise.
func (d *sinkDelivery) againOrRelease(ctx context.Context, notAttempted declined) []int {
	if len(notAttempted.rows) == 0 {
		return nil
	}
	if ctx.Err() != nil || !d.waitAvailable(ctx, notAttempted.unavailable) {
		d.releaseRows(notAttempted.rows, releaseDelay(ctx, d.cfg))
		return nil
	}
	return notAttempted.rows
}

// releaseRows gives the messages at indexes back without a delivery (their
// attempt does not count): due again after delay.
func (d *sinkDelivery) releaseRows(indexes []int, delay time.Duration) {
	if len(indexes) == 0 {
		return
	}
	out := make([]rowOutcome, 0, len(indexes))
	for _, i := range indexes {
		o := newOutcome(&d.msgs[i], d.tags[i], d.name)
		o.kind, o.delay = kindRelease, delay
		out = append(out, o)
		for _, ob := range d.also {
			ob.observe(&sent{i: i, msg: &d.msgs[i], outcome: o})
		}
	}
	d.settle <- out
}

// sendWithin sends the messages at indexes pending as sendPending does, by
// the delivery's deadline.
func (d *sinkDelivery) sendWithin(ctx context.Context, pending, follows []int) declined {
	dctx, cancel := context.WithDeadline(ctx, d.deadline)
	defer cancel()
	return d.sendPending(dctx, ctx, pending, follows)
}

// sendPending delivers the messages at indexes pending through the sink, within
// dctx, and tells the sendPending's observers each outcome as the sink reports it
// (the last of them passes it to the settlers), except those the sink did
// not attempt while ctx, the relay's, has not ended, which it returns
// (declined). follows, when not nil, orders the send (sendInRounds):
// follows[j] is the position in pending of the message pending[j] must
// follow, or -1.
func (d *sinkDelivery) sendPending(dctx, ctx context.Context, pending, follows []int) (notAttempted declined) {
	sub := make([]sinks.Message, len(pending))
	for j, i := range pending {
		sub[j] = d.msgs[i]
	}
	start := time.Now()
	observers, group := d.observers.begin(ctx, sub, start)
	observers = append(observers, d.also...)
	observers = append(observers, group)

	var mu sync.Mutex
	reported := 0
	report := func(j int, err error) {
		mu.Lock()
		defer mu.Unlock()
		reported++
		i := pending[j]
		s := &sent{i: i, j: j, msg: &d.msgs[i], err: err, at: time.Now()}
		if errors.Is(err, sinks.ErrNotAttempted) && ctx.Err() == nil {
			notAttempted.rows = append(notAttempted.rows, i)
			// Asked as the sink declines, not once the send is over: a
			// pause of the webhook's circuit breaker (a second) may end
			// while the rest of a send goes on, and a sink available
			// by then looked as if it had declined while available:
			// its rows waited RELAY_BACKOFF_MIN (an hour in a test).
			notAttempted.unavailable = notAttempted.unavailable || d.unavailable()
			s.notAttempted = true
		} else {
			s.outcome = outcomeOf(d.cfg, &d.msgs[i], d.tags[i], d.name, err, ctx.Err() != nil)
		}
		for _, ob := range observers {
			ob.observe(s)
		}
	}
	send := func(msgs []sinks.Message, report func(k int, err error)) {
		errs := d.sink.Deliver(dctx, msgs)
		if len(errs) != len(msgs) {
			err := fmt.Errorf("sink %s returned %d outcomes for %d messages", d.name, len(errs), len(msgs))
			errs = sinks.Fill(make([]error, len(msgs)), err)
		}
		for k, err := range errs {
			report(k, err)
		}
	}
	s, streams := d.sink.(sinks.Streamer)
	if streams {
		send = func(msgs []sinks.Message, report func(k int, err error)) { s.DeliverStream(dctx, msgs, report) }
	}
	// A stream's outcomes wait at most settleEvery for their settle. Those
	// of a send in rounds (sendInRounds) go settleGroup at a time, and the
	// rest when it ends: flushed every settleEvery as well, a 200k burst
	// over 100 hot keys made 9.4–12.8k settles instead of 2.7–2.8k and
	// drained a quarter slower.
	var stop chan struct{}
	if streams {
		stop = make(chan struct{})
		go func() {
			t := time.NewTicker(settleEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					mu.Lock()
					group.flush()
					mu.Unlock()
				}
			}
		}()
	}
	sendInRounds(dctx, sub, follows, send, report)
	if stop != nil {
		close(stop)
	}
	mu.Lock()
	defer mu.Unlock()
	if reported != len(sub) {
		// A streaming sink that broke its contract: the rest come back
		// when their leases expire.
		d.observers.log.Error("sink reported fewer outcomes than messages", "sink", d.name, "num_reported", reported, "num_messages", len(sub))
	}
	for _, ob := range observers {
		ob.done()
	}
	return notAttempted
}

// notAttemptedRetryMin is the least time left before the deadline for
// which the relay waits for a sink to be available again rather than
// releasing the rows it did not attempt.
const notAttemptedRetryMin = 2 * time.Second

// waitAvailable waits, when the sink did not attempt messages because it
// was unavailable (paused, disconnected: wasUnavailable, or it is now),
// until it is available again, polling, and reports whether it is, with
// time enough before the deadline to send. A sink that did not attempt
// messages while available (out of time before its deadline, throttled)
// is not asked again.
func (d *sinkDelivery) waitAvailable(ctx context.Context, wasUnavailable bool) bool {
	a, ok := d.sink.(sinks.Availability)
	if !ok || !wasUnavailable && a.Available() == nil {
		return false
	}
	for {
		if time.Until(d.deadline) < notAttemptedRetryMin {
			return false
		}
		if a.Available() == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(min(d.cfg.PollInterval, 50*time.Millisecond)):
		}
	}
}

// unavailable reports whether d's sink says it cannot deliver now
// (sinks.Availability).
func (d *sinkDelivery) unavailable() bool {
	a, ok := d.sink.(sinks.Availability)
	return ok && a.Available() != nil
}

// releaseDelay is how long a released row waits: none at shutdown (another
// relay may take it at once), else BackoffMin, so that a sink that keeps
// refusing does not turn claims into a busy loop.
func releaseDelay(ctx context.Context, cfg *Config) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	return cfg.BackoffMin
}
