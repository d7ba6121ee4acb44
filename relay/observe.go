package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Deliveries report to observers: every outcome a sink reports in a send
// goes, under the send's lock and in order, to each observer of the send
// (observer.observe), and each learns when the send ended (done). The
// observers of a sink's sends are, in order: its tracing (the span of each
// message, whose context the others log), those a mode adds (the waves
// that keep each key's order), the sink's health (latency, the sink watch,
// the failure log) and, last, the settle groups that pass the outcomes to
// the settlers. A new concern that follows deliveries is an observer, not
// a branch of send.

// sent is one message's outcome in a send, as the observers see it.
type sent struct {
	// i is the message's index in its delivery, j in the send.
	i, j int
	msg  *sinks.Message
	// outcome is what becomes of the row; err is the sink's error.
	outcome rowOutcome
	err     error
	// notAttempted is set when the sink did not attempt the message: it is
	// sent again or released later, and has no outcome yet.
	notAttempted bool
	// span is the context of the message's span (set by the tracing
	// observer; invalid when tracing is off), at when the sink reported.
	span trace.SpanContext
	at   time.Time
}

// observer learns the outcome of every message of a send (observe), then
// that the send ended (done).
type observer interface {
	observe(s *sent)
	done()
}

// sinkObservers make the observers of one sink's sends (begin).
type sinkObservers struct {
	name     string
	log      *slog.Logger
	latency  prometheus.Observer
	duration prometheus.Observer
	watch    *sinkWatch
	failures *failureLog
	// tracer starts the spans of each send; nil when tracing is off.
	tracer *sendTracer
	settle chan<- []rowOutcome
}

// begin returns the observers of a send of msgs that starts at start, the
// settle groups last (returned alone too: a streaming send flushes them on
// a timer).
func (o *sinkObservers) begin(ctx context.Context, msgs []sinks.Message, start time.Time) ([]observer, *settleGroups) {
	var obs []observer
	if o.tracer != nil {
		obs = append(obs, &traceObserver{t: o.tracer.startSpans(ctx, msgs, start)})
	}
	obs = append(obs, &sinkHealth{o: o, start: start})
	return obs, &settleGroups{settle: o.settle}
}

// traceObserver records each outcome on its message's span and ends the
// spans with the send.
type traceObserver struct{ t *sendTrace }

func (ob *traceObserver) observe(s *sent) {
	if s.notAttempted {
		ob.t.recordOutcome(s.j, errNotAttempted)
		return
	}
	ob.t.recordOutcome(s.j, errClass(s.outcome.kind, s.outcome.reason, s.err))
	s.span = ob.t.spanContext(s.j)
}

func (ob *traceObserver) done() { ob.t.end() }

// sinkHealth follows a sink's deliveries: the latency of each delivered
// message, the sink watch (stalls, and deliveries after them), the failure
// log, and the duration of each send.
type sinkHealth struct {
	o     *sinkObservers
	start time.Time
}

func (h *sinkHealth) observe(s *sent) {
	if s.notAttempted {
		return
	}
	o := h.o
	switch s.outcome.kind {
	case kindDelivered:
		o.latency.Observe(s.at.Sub(s.msg.CreatedAt).Seconds())
		if gap := o.watch.recordDelivery(s.at); gap > 0 {
			o.log.Info("sink delivers again", "sink", o.name, "delivered_nothing_for", gap.Round(time.Second))
		}
	case kindRelease:
	default:
		o.failures.add(s.msg, s.outcome, false, s.span)
		if s.outcome.kind == kindRetry {
			if msg, attrs := o.watch.recordFailure(s.at, s.outcome.err); msg != "" {
				o.log.Error(msg, append(append([]any{"sink", o.name}, attrs...), traceIDs(s.span)...)...)
			}
		}
	}
}

func (h *sinkHealth) done() { h.o.duration.Observe(time.Since(h.start).Seconds()) }

// settleGroup is how many outcomes of a streaming sink are passed to the
// settlers together, and settleEvery how long the first of them may wait
// for the others.
const (
	settleGroup = 64
	settleEvery = 5 * time.Millisecond
)

// settleGroups pass a send's outcomes to the settlers settleGroup at a
// time, and the rest when flushed (on a timer, and when the send ends).
type settleGroups struct {
	settle chan<- []rowOutcome
	group  []rowOutcome
}

func (g *settleGroups) observe(s *sent) {
	if s.notAttempted {
		return
	}
	g.group = append(g.group, s.outcome)
	if len(g.group) >= settleGroup {
		g.flush()
	}
}

func (g *settleGroups) done() { g.flush() }

// flush passes the outcomes gathered to the settlers.
func (g *settleGroups) flush() {
	if len(g.group) > 0 {
		g.settle <- g.group
		g.group = nil
	}
}

// newSinkObservers returns the observers' makers of cfg's sinks, whose
// outcomes go to settle.
func newSinkObservers(cfg *Config, log *slog.Logger, watches *sinkWatches, failures *failureLogs, settle chan<- []rowOutcome) map[string]*sinkObservers {
	var tracer trace.Tracer
	var traces map[string]*sinkTrace
	if cfg.TracerProvider != nil {
		tracer = cfg.TracerProvider.Tracer(tracerName, trace.WithInstrumentationVersion(cfg.Version))
		traces = newSinkTraces(*cfg)
	}
	out := make(map[string]*sinkObservers, len(cfg.Sinks))
	for name := range cfg.Sinks {
		o := &sinkObservers{name: name, log: log, settle: settle, watch: watches.forSink(name), failures: failures.forSink(name),
			latency: cfg.Metrics.DeliveryLatency.WithLabelValues(name), duration: cfg.Metrics.DeliverDuration.WithLabelValues(name)}
		if tracer != nil {
			o.tracer = &sendTracer{tracer: tracer, name: name, st: traces[name], inject: cfg.TraceInject}
		}
		out[name] = o
	}
	return out
}
