package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// deliver hands batch (rows for one sink) to that sink and passes the
// outcomes to the settlers as they come: outcomes decided without sending
// first, then those of the sink, in groups as a streaming sink reports them.
// Deliveries end by deadline, before the lease does. Messages the sink did
// not attempt (it paused, lost its connection) stay with this delivery and
// are sent again once the sink is available, while the deadline allows:
// only those left then are released, each costing a row update. When ctx
// ends first (shutdown), unfinished rows are released.
func (r *Relay) deliver(ctx context.Context, name string, batch []claimed, deadline time.Time) {
	defer r.deliveries.Done()
	decided, msgs, tags := r.triage(name, batch)
	if len(decided) > 0 {
		r.settleCh <- decided
	}
	if len(msgs) == 0 {
		return
	}
	if r.cfg.Mode == outbox.ModePartitioned {
		r.deliverInKeyOrder(ctx, name, msgs, tags, deadline)
		return
	}
	pending := make([]int, len(msgs))
	for i := range pending {
		pending[i] = i
	}
	r.deliverEach(ctx, name, msgs, tags, pending, deadline, nil)
}

// deliverEach sends the messages at indexes pending to sink name, as one
// delivery, and passes every outcome to the settlers (observe, when set,
// learns each one's kind as well). Messages the sink did not attempt are
// sent again once it is available, while deadline allows, and released
// otherwise.
func (r *Relay) deliverEach(ctx context.Context, name string, msgs []sinks.Message, tags []claimTag, pending []int,
	deadline time.Time, observe func(i int, k outcomeKind)) {
	sink := r.cfg.Sinks[name]
	failures := r.failures.of(name)
	for {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		notAttempted := r.send(dctx, ctx, name, sink, msgs, tags, pending, failures, observe)
		cancel()
		if len(notAttempted) == 0 {
			return
		}
		if ctx.Err() != nil || !r.waitAvailable(ctx, sink, deadline) {
			r.release(ctx, name, msgs, tags, notAttempted, r.releaseDelay(ctx), observe)
			return
		}
		pending = notAttempted
	}
}

// release gives the messages at indexes back without a delivery (their
// attempt does not count): due again after delay.
func (r *Relay) release(ctx context.Context, name string, msgs []sinks.Message, tags []claimTag, indexes []int,
	delay time.Duration, observe func(i int, k outcomeKind)) {
	if len(indexes) == 0 {
		return
	}
	out := make([]outcome, 0, len(indexes))
	for _, i := range indexes {
		o := newOutcome(&msgs[i], tags[i], name)
		o.kind, o.delay = kindRelease, delay
		out = append(out, o)
		if observe != nil {
			observe(i, kindRelease)
		}
	}
	r.settleCh <- out
}

// triage decides the rows that are not sent (no sink, unreadable, past
// their attempts, duplicates) and returns the others as messages, with
// their claims' tags.
func (r *Relay) triage(name string, batch []claimed) (decided []outcome, msgs []sinks.Message, tags []claimTag) {
	_, ok := r.cfg.Sinks[name]
	for i := range batch {
		c := &batch[i]
		o := newOutcome(&c.Message, c.tag(), name)
		switch {
		case c.unreadable != "":
			o.kind, o.reason, o.err = kindDead, outbox.ReasonPermanent, c.unreadable
		case !ok:
			o.kind, o.reason = kindDead, outbox.ReasonNoSink
			o.err = fmt.Sprintf("destination %q is not a configured sink (configured: %s)",
				c.Destination, strings.Join(slices.Sorted(maps.Keys(r.cfg.Sinks)), ", "))
		case c.rescued && c.Attempt > r.cfg.MaxAttempts:
			// Claimed again and again without an outcome: its leases
			// expired each time, so the relay may be crashing or stalling
			// on this very message. Stop before it takes the relay down
			// once more.
			o.kind, o.reason = kindDead, outbox.ReasonExhausted
			o.err = fmt.Sprintf("claimed %d times without a delivery outcome (each lease expired): the relay may crash or stall on this message", c.Attempt)
		case c.duplicate:
			o.kind = kindDuplicate
		default:
			msgs = append(msgs, c.Message)
			tags = append(tags, c.tag())
			if r.cfg.CloudEventsSource != "" {
				addCloudEvents(&msgs[len(msgs)-1], r.cfg.CloudEventsSource)
			}
			continue
		}
		if o.kind == kindDead {
			r.failures.of(name).add(&c.Message, o, true)
		}
		decided = append(decided, o)
	}
	return decided, msgs, tags
}

// settleGroup is how many outcomes of a streaming sink are passed to the
// settlers together, and settleEvery how long the first of them may wait
// for the others.
const (
	settleGroup = 64
	settleEvery = 5 * time.Millisecond
)

// send delivers the messages at indexes pending through sink and passes
// their outcomes to the settlers (and to observe, when set), except those
// the sink did not attempt (while the relay is not shutting down), whose
// indexes it returns.
func (r *Relay) send(dctx, ctx context.Context, name string, sink sinks.Sink, msgs []sinks.Message, tags []claimTag,
	pending []int, failures *failureLog, observe func(i int, k outcomeKind)) (notAttempted []int) {
	sub := make([]sinks.Message, len(pending))
	for j, i := range pending {
		sub[j] = msgs[i]
	}
	latency := r.metrics.DeliveryLatency.WithLabelValues(name)
	watch := r.watches[name]
	start := time.Now()

	var mu sync.Mutex
	var group []outcome
	flush := func() {
		if len(group) > 0 {
			r.settleCh <- group
			group = nil
		}
	}
	reported := 0
	report := func(j int, err error) {
		mu.Lock()
		defer mu.Unlock()
		reported++
		i := pending[j]
		if errors.Is(err, sinks.ErrNotAttempted) && ctx.Err() == nil {
			notAttempted = append(notAttempted, i)
			return
		}
		o := r.outcomeOf(&msgs[i], tags[i], name, err, ctx.Err() != nil)
		if observe != nil {
			observe(i, o.kind)
		}
		now := time.Now()
		switch o.kind {
		case kindDelivered:
			latency.Observe(now.Sub(msgs[i].CreatedAt).Seconds())
			if d := watch.delivered(now); d > 0 {
				r.log.Info("sink delivers again", "sink", name, "delivered_nothing_for", d.Round(time.Second))
			}
		case kindRelease:
		default:
			failures.add(&msgs[i], o, false)
			if o.kind == kindRetry {
				if msg, attrs := watch.failed(now, o.err); msg != "" {
					r.log.Error(msg, append([]any{"sink", name}, attrs...)...)
				}
			}
		}
		group = append(group, o)
		if len(group) >= settleGroup {
			flush()
		}
	}
	if s, ok := sink.(sinks.Streamer); ok {
		stop := make(chan struct{})
		go func() {
			t := time.NewTicker(settleEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					mu.Lock()
					flush()
					mu.Unlock()
				}
			}
		}()
		s.DeliverStream(dctx, sub, report)
		close(stop)
	} else {
		errs := sink.Deliver(dctx, sub)
		if len(errs) != len(sub) {
			err := fmt.Errorf("sink %s returned %d outcomes for %d messages", name, len(errs), len(sub))
			errs = sinks.Fill(make([]error, len(sub)), err)
		}
		for j, err := range errs {
			report(j, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reported != len(sub) {
		// A streaming sink that broke its contract: the rest come back
		// when their leases expire.
		r.log.Error("sink reported fewer outcomes than messages", "sink", name, "num_reported", reported, "num_messages", len(sub))
	}
	flush()
	r.metrics.DeliverDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	return notAttempted
}

// notAttemptedRetryMin is the least time left before the deadline for
// which the relay waits for a sink to be available again rather than
// releasing the rows it did not attempt.
const notAttemptedRetryMin = 2 * time.Second

// waitAvailable waits, when sink did not attempt messages because it is
// unavailable (paused, disconnected), until it is available again, polling,
// and reports whether it is, with time enough before deadline to send. A
// sink that did not attempt messages while available (out of time before
// its deadline) is not asked again.
func (r *Relay) waitAvailable(ctx context.Context, sink sinks.Sink, deadline time.Time) bool {
	a, ok := sink.(sinks.Availability)
	if !ok || a.Available() == nil {
		return false
	}
	for {
		if time.Until(deadline) < notAttemptedRetryMin {
			return false
		}
		if a.Available() == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(min(r.cfg.PollInterval, 50*time.Millisecond)):
		}
	}
}

// releaseDelay is how long a released row waits: none at shutdown (another
// relay may take it at once), else BackoffMin, so that a sink that keeps
// refusing does not turn claims into a busy loop.
func (r *Relay) releaseDelay(ctx context.Context) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	return r.cfg.BackoffMin
}
