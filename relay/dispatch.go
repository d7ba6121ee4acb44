package relay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/keychain"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// dispatcher starts the deliveries of claimed batches: one per sink of a
// batch, sent through the mode (mode.deliver), whose outcomes go to the
// settlers.
type dispatcher struct {
	cfg      *Config
	mode     deliveryMode
	inflight *inFlight
	metrics  *Metrics
	failures *failureLogs
	// chains learn the outcomes decided without sending (triage).
	chains *keychain.Chains
	// observers make the observers of each sink's sends (observe.go).
	observers map[string]*sinkObservers
	// settle takes the outcomes to the settlers; deliveries counts the
	// deliveries under way.
	settle     chan []rowOutcome
	deliveries sync.WaitGroup
}

// dispatch starts one delivery per sink in batch and returns how many rows
// went to each. Sinks in reserved had room taken for the claim; rows for
// other sinks (destinations that name no configured sink) are added to the
// in-flight counts here.
func (d *dispatcher) dispatch(ctx context.Context, batch []claimedRow, reserved []string, deadline time.Time) map[string]int {
	bySink := map[string][]claimedRow{}
	for _, c := range batch {
		bySink[c.sink] = append(bySink[c.sink], c)
	}
	used := make(map[string]int, len(bySink))
	for name, rows := range bySink {
		used[name] = len(rows)
		if !slices.Contains(reserved, name) {
			d.inflight.add(name, len(rows))
		}
		d.metrics.InFlight.WithLabelValues(name).Add(float64(len(rows)))
		d.deliveries.Add(1)
		go d.deliver(ctx, name, rows, deadline)
	}
	return used
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
func (d *dispatcher) deliver(ctx context.Context, name string, batch []claimedRow, deadline time.Time) {
	defer d.deliveries.Done()
	decided, msgs, tags := d.triage(name, batch)
	for i := range decided {
		d.chains.Resolve(decided[i].link, passesKey(decided[i].kind))
	}
	if len(decided) > 0 {
		d.settle <- decided
	}
	if len(msgs) == 0 {
		return
	}
	d.mode.deliverBatch(ctx, &sinkDelivery{
		cfg: d.cfg, name: name, sink: d.cfg.Sinks[name], msgs: msgs, tags: tags, deadline: deadline,
		observers: d.observers[name], settle: d.settle,
	})
}

// triage decides the rows that are not sent (no sink, unreadable, past
// their attempts, duplicates) and returns the others as messages, with
// their claims' tags.
func (d *dispatcher) triage(name string, batch []claimedRow) (decided []rowOutcome, msgs []sinks.Message, tags []claimTag) {
	_, ok := d.cfg.Sinks[name]
	for i := range batch {
		c := &batch[i]
		o := newOutcome(&c.Message, c.tag(), name)
		switch {
		case c.unreadable != "":
			o.kind, o.reason, o.err = kindDead, outbox.ReasonPermanent, c.unreadable
		case !ok:
			o.kind, o.reason = kindDead, outbox.ReasonNoSink
			o.err = fmt.Sprintf("destination %q is not a configured sink (configured: %s)",
				c.Destination, strings.Join(slices.Sorted(maps.Keys(d.cfg.Sinks)), ", "))
		case c.rescued && c.Attempt > d.cfg.MaxAttempts:
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
			if d.cfg.CloudEventsSource != "" {
				addCloudEvents(&msgs[len(msgs)-1], d.cfg.CloudEventsSource)
			}
			continue
		}
		if o.kind == kindDead {
			d.failures.forSink(name).add(&c.Message, o, true, trace.SpanContext{})
		}
		decided = append(decided, o)
	}
	return decided, msgs, tags
}
