package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Dead-letter reasons.
const (
	ReasonPermanent = "permanent" // the sink said retrying cannot help
	ReasonExhausted = "exhausted" // MaxAttempts deliveries failed
	ReasonNoSink    = "no_sink"   // the destination names no configured sink
	ReasonCancelled = "cancelled" // an operator cancelled the message
)

// maxErrorLen bounds the error text stored with a row.
const maxErrorLen = 2000

type outcomeKind uint8

const (
	kindDelivered outcomeKind = iota // archive and record the key
	kindDuplicate                    // archive without sending: key already delivered
	kindRetry                        // requeue after delay, attempt counted
	kindRelease                      // requeue now, attempt given back (shutdown)
	kindDead                         // move to the dead letters
)

// outcome is what became of one claimed row; the settler writes it down.
type outcome struct {
	id      int64
	seq     int32 // the claim's claim_seq: the settle's guard
	attempt int
	sink    string
	kind    outcomeKind
	delay   time.Duration // kindRetry
	reason  string        // kindDead
	err     string        // kindRetry, kindDead
}

// unknownSink groups the rows whose destination names no configured sink;
// it is their label in metrics, so that row data cannot create series.
const unknownSink = "(unknown)"

// deliver hands batch (rows for one sink) to that sink and passes the
// outcomes to the settler. Deliveries end by deadline, before the lease does;
// when ctx ends first (shutdown), unfinished rows are released.
func (r *Relay) deliver(ctx context.Context, name string, batch []claimed, deadline time.Time) {
	defer r.deliveries.Done()
	out := make([]outcome, 0, len(batch))
	sink, ok := r.cfg.Sinks[name]
	msgs := make([]sinks.Message, 0, len(batch))
	seqs := make([]int32, 0, len(batch))
	for i := range batch {
		c := &batch[i]
		o := outcome{id: c.ID, seq: c.seq, attempt: c.Attempt, sink: name}
		switch {
		case !ok:
			o.kind, o.reason = kindDead, ReasonNoSink
			o.err = fmt.Sprintf("destination %q is not a configured sink (configured: %s)",
				c.Destination, strings.Join(slices.Sorted(maps.Keys(r.cfg.Sinks)), ", "))
		case c.rescued && c.Attempt > r.cfg.MaxAttempts:
			// Claimed again and again without an outcome: its leases
			// expired each time, so the relay may be crashing or stalling
			// on this very message. Stop before it takes the relay down
			// once more.
			o.kind, o.reason = kindDead, ReasonExhausted
			o.err = fmt.Sprintf("claimed %d times without a delivery outcome (each lease expired): the relay may crash or stall on this message", c.Attempt)
		case c.duplicate:
			o.kind = kindDuplicate
		default:
			msgs = append(msgs, c.Message)
			seqs = append(seqs, c.seq)
			if r.cfg.CloudEventsSource != "" {
				addCloudEvents(&msgs[len(msgs)-1], r.cfg.CloudEventsSource)
			}
			continue
		}
		out = append(out, o)
	}
	if !ok {
		r.log.Warn("dead-lettering rows for destinations that name no configured sink", "num_rows", len(batch))
	}
	if len(msgs) > 0 {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		start := time.Now()
		errs := sink.Deliver(dctx, msgs)
		cancel()
		now := time.Now()
		r.metrics.DeliverDuration.WithLabelValues(name).Observe(now.Sub(start).Seconds())
		if len(errs) != len(msgs) {
			err := fmt.Errorf("sink %s returned %d outcomes for %d messages", name, len(errs), len(msgs))
			errs = sinks.Fill(make([]error, len(msgs)), err)
		}
		latency := r.metrics.DeliveryLatency.WithLabelValues(name)
		failures := map[string]int{}
		for i, err := range errs {
			o := r.outcomeOf(&msgs[i], seqs[i], name, err, ctx.Err() != nil)
			if o.kind == kindDelivered {
				latency.Observe(now.Sub(msgs[i].CreatedAt).Seconds())
			} else if o.kind != kindRelease {
				failures[o.err]++
			}
			out = append(out, o)
		}
		for text, n := range failures {
			r.log.Warn("delivery failed", "sink", name, "num_messages", n, "err", text)
		}
	}
	r.settleCh <- out
}

// outcomeOf classifies the result of delivering m under claim seq.
func (r *Relay) outcomeOf(m *sinks.Message, seq int32, sink string, err error, shuttingDown bool) outcome {
	o := outcome{id: m.ID, seq: seq, attempt: m.Attempt, sink: sink}
	switch {
	case err == nil:
		o.kind = kindDelivered
	case sinks.IsPermanent(err):
		o.kind, o.reason, o.err = kindDead, ReasonPermanent, errorText(err)
	case shuttingDown && errors.Is(err, context.Canceled):
		o.kind = kindRelease // claimable again at once, by any relay
	case errors.Is(err, sinks.ErrNotAttempted):
		// The sink did not try (paused, disconnected, out of time): back
		// without spending an attempt, after a pause, so that a sink that
		// keeps refusing does not turn claims into a busy loop.
		o.kind, o.delay = kindRelease, r.cfg.BackoffMin
	case m.Attempt >= r.cfg.MaxAttempts:
		o.kind, o.reason = kindDead, ReasonExhausted
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

// errorText is err as it is stored with a row: valid UTF-8 without NUL
// bytes (PostgreSQL text refuses both), at most maxErrorLen bytes.
func errorText(err error) string {
	s := err.Error()
	truncated := len(s) > maxErrorLen
	if truncated {
		s = s[:maxErrorLen]
	}
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
	if truncated {
		s += "…"
	}
	return s
}
