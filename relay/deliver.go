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

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// delivery is one sink's share of a claimed batch on its way: the messages
// and the tags of the claims that leased them, the sink, the deadline
// (before the lease ends), and where its failures and outcomes go. A mode
// sends it all at once (all) or in waves (each, with observe set).
type delivery struct {
	r        *Relay
	name     string
	sink     sinks.Sink
	msgs     []sinks.Message
	tags     []claimTag
	deadline time.Time
	failures *failureLog
	watch    *sinkWatch
	// observe, when set, learns the kind of every outcome, by message
	// index.
	observe func(i int, k outcomeKind)
}

// deliver hands batch (rows for one sink) to that sink through the mode
// and passes the outcomes to the settlers as they come: outcomes decided
// without sending first, then those of the sink, in groups as a streaming
// sink reports them. Deliveries end by deadline, before the lease does.
// Messages the sink did not attempt (it paused, lost its connection) stay
// with this delivery and are sent again once the sink is available, while
// the deadline allows: only those left then are released, each costing a
// row update. When ctx ends first (shutdown), unfinished rows are
// released.
func (r *Relay) deliver(ctx context.Context, name string, batch []claimed, deadline time.Time) {
	defer r.deliveries.Done()
	decided, msgs, tags := r.triage(name, batch)
	if len(decided) > 0 {
		r.settleCh <- decided
	}
	if len(msgs) == 0 {
		return
	}
	r.mode.deliver(ctx, &delivery{
		r: r, name: name, sink: r.cfg.Sinks[name], msgs: msgs, tags: tags, deadline: deadline,
		failures: r.failures.of(name), watch: r.watches[name],
	})
}

// all sends every message of d as one delivery.
func (d *delivery) all(ctx context.Context) {
	pending := make([]int, len(d.msgs))
	for i := range pending {
		pending[i] = i
	}
	d.each(ctx, pending)
}

// each sends the messages at indexes pending as one delivery and passes
// every outcome to the settlers. Messages the sink did not attempt are sent
// again once it is available, while the deadline allows, and released
// otherwise.
func (d *delivery) each(ctx context.Context, pending []int) {
	for {
		dctx, cancel := context.WithDeadline(ctx, d.deadline)
		notAttempted := d.send(dctx, ctx, pending)
		cancel()
		if len(notAttempted) == 0 {
			return
		}
		if ctx.Err() != nil || !d.waitAvailable(ctx) {
			d.release(notAttempted, d.r.releaseDelay(ctx))
			return
		}
		pending = notAttempted
	}
}

// release gives the messages at indexes back without a delivery (their
// attempt does not count): due again after delay.
func (d *delivery) release(indexes []int, delay time.Duration) {
	if len(indexes) == 0 {
		return
	}
	out := make([]outcome, 0, len(indexes))
	for _, i := range indexes {
		o := newOutcome(&d.msgs[i], d.tags[i], d.name)
		o.kind, o.delay = kindRelease, delay
		out = append(out, o)
		if d.observe != nil {
			d.observe(i, kindRelease)
		}
	}
	d.r.settleCh <- out
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
			r.failures.of(name).add(&c.Message, o, true, trace.SpanContext{})
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

// send delivers the messages at indexes pending through the sink, within
// dctx, and passes their outcomes to the settlers, except those the sink
// did not attempt (while ctx, the relay's, has not ended), whose indexes it
// returns.
func (d *delivery) send(dctx, ctx context.Context, pending []int) (notAttempted []int) {
	r := d.r
	sub := make([]sinks.Message, len(pending))
	for j, i := range pending {
		sub[j] = d.msgs[i]
	}
	latency := r.metrics.DeliveryLatency.WithLabelValues(d.name)
	start := time.Now()
	var tr *sendTrace
	if r.tracer != nil {
		tr = d.startTrace(ctx, sub, start)
	}

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
			if tr != nil {
				tr.record(j, errNotAttempted)
			}
			return
		}
		o := r.outcomeOf(&d.msgs[i], d.tags[i], d.name, err, ctx.Err() != nil)
		var sc trace.SpanContext
		if tr != nil {
			tr.record(j, errClass(o.kind, o.reason, err))
			sc = tr.spanContext(j)
		}
		if d.observe != nil {
			d.observe(i, o.kind)
		}
		now := time.Now()
		switch o.kind {
		case kindDelivered:
			latency.Observe(now.Sub(d.msgs[i].CreatedAt).Seconds())
			if gap := d.watch.delivered(now); gap > 0 {
				r.log.Info("sink delivers again", "sink", d.name, "delivered_nothing_for", gap.Round(time.Second))
			}
		case kindRelease:
		default:
			d.failures.add(&d.msgs[i], o, false, sc)
			if o.kind == kindRetry {
				if msg, attrs := d.watch.failed(now, o.err); msg != "" {
					r.log.Error(msg, append(append([]any{"sink", d.name}, attrs...), traceIDs(sc)...)...)
				}
			}
		}
		group = append(group, o)
		if len(group) >= settleGroup {
			flush()
		}
	}
	if s, ok := d.sink.(sinks.Streamer); ok {
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
		errs := d.sink.Deliver(dctx, sub)
		if len(errs) != len(sub) {
			err := fmt.Errorf("sink %s returned %d outcomes for %d messages", d.name, len(errs), len(sub))
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
		r.log.Error("sink reported fewer outcomes than messages", "sink", d.name, "num_reported", reported, "num_messages", len(sub))
	}
	flush()
	if tr != nil {
		tr.end()
	}
	r.metrics.DeliverDuration.WithLabelValues(d.name).Observe(time.Since(start).Seconds())
	return notAttempted
}

// outcomeOf classifies the result of delivering m under claim t.
func (r *Relay) outcomeOf(m *sinks.Message, t claimTag, sink string, err error, shuttingDown bool) outcome {
	o := newOutcome(m, t, sink)
	switch {
	case err == nil:
		o.kind = kindDelivered
	case sinks.IsPermanent(err):
		o.kind, o.reason, o.err = kindDead, outbox.ReasonPermanent, errorText(err)
	case shuttingDown && errors.Is(err, context.Canceled):
		o.kind = kindRelease // claimable again at once, by any relay
	case errors.Is(err, sinks.ErrNotAttempted):
		// The sink did not try (paused, disconnected, out of time): back
		// without spending an attempt, after a pause, so that a sink that
		// keeps refusing does not turn claims into a busy loop.
		o.kind, o.delay = kindRelease, r.cfg.BackoffMin
	case m.Attempt >= r.cfg.MaxAttempts:
		o.kind, o.reason = kindDead, outbox.ReasonExhausted
		o.err = fmt.Sprintf("after %d attempts: %s", m.Attempt, errorText(err))
	default:
		o.kind, o.err = kindRetry, errorText(err)
		o.delay = backoff(m.Attempt, r.cfg.BackoffMin, r.cfg.BackoffMax)
		if after, ok := sinks.RetryDelay(err); ok && after > o.delay {
			o.delay = after
		}
	}
	return o
}

// notAttemptedRetryMin is the least time left before the deadline for
// which the relay waits for a sink to be available again rather than
// releasing the rows it did not attempt.
const notAttemptedRetryMin = 2 * time.Second

// waitAvailable waits, when the sink did not attempt messages because it is
// unavailable (paused, disconnected), until it is available again, polling,
// and reports whether it is, with time enough before the deadline to send.
// A sink that did not attempt messages while available (out of time before
// its deadline) is not asked again.
func (d *delivery) waitAvailable(ctx context.Context) bool {
	a, ok := d.sink.(sinks.Availability)
	if !ok || a.Available() == nil {
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
		case <-time.After(min(d.r.cfg.PollInterval, 50*time.Millisecond)):
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
