package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// Tracing (Config.TracerProvider): one CLIENT span per delivery of a batch
// to a sink and destination, a root span linked to the trace context each
// row carries in its traceparent header (the producer's), not parented by
// it: a batch gathers many producers' events. The span is named
// "send {sink}" after the configured sink, never after the destination:
// the OpenTelemetry messaging conventions name a send span after its
// destination only when destinations are few, and a destination here is
// made of the row's topic, which any producer chooses. The destination is
// the messaging.destination.name attribute, cut to maxLoggedValueBytes.
// Without a TracerProvider the relay has no tracer, and the delivery path
// does nothing more than check that.

// tracerName names the relay's tracer (the instrumentation scope).
const tracerName = "github.com/outbox-relay/outbox-relay/relay"

// maxLinks bounds the links of one span (the SDK's default limit); the
// others are counted in outbox_relay.links_dropped.
const maxLinks = 128

// The relay's own attributes, under its private prefix.
const (
	attrSchema       = attribute.Key("outbox_relay.schema")
	attrMode         = attribute.Key("outbox_relay.mode")
	attrSink         = attribute.Key("outbox_relay.sink")
	attrDelivered    = attribute.Key("outbox_relay.delivered")
	attrFailed       = attribute.Key("outbox_relay.failed")
	attrLinksDropped = attribute.Key("outbox_relay.links_dropped")
	attrAttempt      = attribute.Key("outbox_relay.attempt")
	attrOutboxWait   = attribute.Key("outbox_relay.outbox_wait_ms")
)

// Classes of failure, the error.type of a span one of whose messages
// failed; the most severe of the span's wins.
const (
	errNotAttempted = "not_attempted" // the sink did not try (unavailable, out of time, shutdown)
	errRetry        = "retry"         // failed, will be retried
	errTimeout      = "timeout"       // the delivery's deadline passed
	errExhausted    = outbox.ReasonExhausted
	errPermanent    = outbox.ReasonPermanent
)

var errSeverity = map[string]int{errNotAttempted: 1, errRetry: 2, errTimeout: 3, errExhausted: 4, errPermanent: 5}

// traceContext reads and writes traceparent and tracestate.
var traceContext propagation.TraceContext

// sinkTrace is what the spans of one sink carry: its attributes and the
// relay's, and whether it is a messaging system.
type sinkTrace struct {
	traced    sinks.Traced // nil: the sink does not describe itself
	attrs     []attribute.KeyValue
	messaging bool
}

// newSinkTraces returns the sinkTrace of every sink of cfg.
func newSinkTraces(cfg Config) map[string]*sinkTrace {
	out := make(map[string]*sinkTrace, len(cfg.Sinks))
	for name, s := range cfg.Sinks {
		st := &sinkTrace{attrs: []attribute.KeyValue{
			attrSchema.String(cfg.Schema), attrMode.String(string(cfg.Mode)), attrSink.String(name),
		}}
		if t, ok := s.(sinks.Traced); ok {
			st.traced = t
			for _, kv := range t.TraceAttributes() {
				st.messaging = st.messaging || kv.Key == semconv.MessagingSystemKey
				st.attrs = append(st.attrs, kv)
			}
		}
		out[name] = st
	}
	return out
}

// traceDestination is where m goes, for grouping spans.
func (st *sinkTrace) traceDestination(m *sinks.Message, sink string) string {
	if st.traced == nil {
		return sink
	}
	return st.traced.TraceDestination(m)
}

// sendTrace is the spans of one send: one per destination of its
// messages, and the span of each message. Its methods but start are
// called under the send's lock.
type sendTrace struct {
	spans []sendSpan
	of    []int // span index, by message index in the send
}

type sendSpan struct {
	span      trace.Span
	n         int
	delivered int
	failed    int
	errType   string
}

// sendTracer starts the spans of one sink's sends.
type sendTracer struct {
	tracer trace.Tracer
	// name is the sink's, st what its spans carry, and inject is
	// Config.TraceInject.
	name   string
	st     *sinkTrace
	inject bool
}

// startSpans starts the spans of sending msgs (a delivery's messages at its
// pending indexes), and, with Config.TraceInject, gives each message
// without a traceparent its span's (cloning its headers: msgs are the
// send's own copies).
func (tr *sendTracer) startSpans(ctx context.Context, msgs []sinks.Message, now time.Time) *sendTrace {
	st := tr.st
	t := &sendTrace{of: make([]int, len(msgs))}
	byDest := map[string]int{}
	var dests []string
	for j := range msgs {
		dest := st.traceDestination(&msgs[j], tr.name)
		k, ok := byDest[dest]
		if !ok {
			k = len(t.spans)
			byDest[dest] = k
			t.spans = append(t.spans, sendSpan{})
			dests = append(dests, dest)
		}
		t.of[j] = k
		t.spans[k].n++
	}
	for k := range t.spans {
		s := &t.spans[k]
		_, s.span = tr.tracer.Start(ctx, "send "+tr.name,
			trace.WithSpanKind(trace.SpanKindClient), trace.WithNewRoot(), trace.WithTimestamp(now))
		if !s.span.IsRecording() {
			continue
		}
		s.span.SetAttributes(st.attrs...)
		if st.messaging {
			s.span.SetAttributes(
				semconv.MessagingDestinationName(clip(dests[k], maxLoggedValueBytes)),
				semconv.MessagingOperationTypeSend,
				semconv.MessagingOperationName("send"),
			)
			if s.n > 1 {
				s.span.SetAttributes(semconv.MessagingBatchMessageCount(s.n))
			}
		}
	}
	links := make([]int, len(t.spans))
	for j := range msgs {
		m := &msgs[j]
		s := &t.spans[t.of[j]]
		if !s.span.IsRecording() {
			// Nothing to link; its context may still be injected.
		} else if sc := linkedContext(m.Headers); sc.IsValid() {
			if links[t.of[j]] < maxLinks {
				s.span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
					semconv.MessagingMessageID(m.IdempotencyKey),
					attrAttempt.Int(m.Attempt),
					attrOutboxWait.Int64(now.Sub(m.CreatedAt).Milliseconds()),
				}})
			}
			links[t.of[j]]++
		}
		if tr.inject {
			if _, ok := m.Headers["traceparent"]; !ok {
				h := make(map[string]string, len(m.Headers)+2)
				maps.Copy(h, m.Headers)
				traceContext.Inject(trace.ContextWithSpan(ctx, s.span), propagation.MapCarrier(h))
				m.Headers = h
			}
		}
	}
	for k, n := range links {
		if n > maxLinks {
			t.spans[k].span.SetAttributes(attrLinksDropped.Int(n - maxLinks))
		}
	}
	return t
}

// linkedContext is the trace context of a row's traceparent and
// tracestate headers; invalid when it has none, or a malformed one.
func linkedContext(h map[string]string) trace.SpanContext {
	if h["traceparent"] == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier(h)))
}

// spanContext is the span context of message j's span.
func (t *sendTrace) spanContext(j int) trace.SpanContext {
	return t.spans[t.of[j]].span.SpanContext()
}

// recordOutcome notes the outcome of message j: kind k, from the sink's err
// (errClass says which failure it is).
func (t *sendTrace) recordOutcome(j int, class string) {
	s := &t.spans[t.of[j]]
	if class == "" {
		s.delivered++
		return
	}
	s.failed++
	if errSeverity[class] > errSeverity[s.errType] {
		s.errType = class
	}
}

// end ends every span, with its counts and, when a message failed, the
// error.type and an Error status.
func (t *sendTrace) end() {
	for k := range t.spans {
		s := &t.spans[k]
		if s.span.IsRecording() {
			s.span.SetAttributes(attrDelivered.Int(s.delivered), attrFailed.Int(s.failed))
			if s.failed > 0 {
				s.span.SetAttributes(semconv.ErrorTypeKey.String(s.errType))
				s.span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages not delivered (%s)", s.failed, s.n, s.errType))
			}
		}
		s.span.End()
	}
}

// errClass is the class of failure of an outcome of kind k reached from
// the sink's err; "" for a delivery (or a duplicate).
func errClass(k outcomeKind, reason string, err error) string {
	switch k {
	case kindDelivered, kindDuplicate:
		return ""
	case kindRelease:
		return errNotAttempted
	case kindDead:
		return reason
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return errTimeout
	}
	return errRetry
}

// traceIDs returns the trace_id and span_id log attributes of sc, or none
// when it is not valid (tracing is off).
func traceIDs(sc trace.SpanContext) []any {
	if !sc.IsValid() {
		return nil
	}
	return []any{"trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String()}
}
