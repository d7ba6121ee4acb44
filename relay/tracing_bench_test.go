package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// benchmarkSend measures the delivery path alone (send, to a sink that
// accepts everything at once) for a batch of 100 rows that carry a
// traceparent, with tp as the TracerProvider (nil: tracing off).
func benchmarkSend(b *testing.B, tp *sdktrace.TracerProvider) {
	cfg := Config{Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}}
	if tp != nil {
		cfg.TracerProvider = tp
	}
	r, err := New(nil, cfg)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range r.dispatcher.settle {
		}
	}()
	defer close(r.dispatcher.settle)
	const n = 100
	d := &sinkDelivery{cfg: &r.cfg, name: "nats", sink: r.cfg.Sinks["nats"], msgs: make([]sinks.Message, n), tags: make([]claimTag, n),
		deadline: time.Now().Add(time.Hour), observers: r.dispatcher.observers["nats"], settle: r.dispatcher.settle}
	pending := make([]int, n)
	for i := range d.msgs {
		d.msgs[i].Topic, d.msgs[i].IdempotencyKey, d.msgs[i].Attempt, d.msgs[i].CreatedAt = "orders.created", fmt.Sprint(i), 1, time.Now()
		d.msgs[i].Headers = map[string]string{"traceparent": fmt.Sprintf("00-%032x-00f067aa0ba902b7-01", i+1)}
		pending[i] = i
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d.sendPending(ctx, ctx, pending, nil)
	}
}

// BenchmarkSend_TracingOff is the delivery path as it runs by default.
func BenchmarkSend_TracingOff(b *testing.B) { benchmarkSend(b, nil) }

// discard is a span processor that drops every span it is given.
type discard struct{}

func (discard) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discard) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discard) Shutdown(context.Context) error                  { return nil }
func (discard) ForceFlush(context.Context) error                { return nil }

// BenchmarkSend_TracingOn records every span, links and attributes
// included, and drops it when it ends.
func BenchmarkSend_TracingOn(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(discard{}))
	benchmarkSend(b, tp)
}

// BenchmarkSend_TracingOnSampledOut has a tracer whose sampler drops
// every span: no links or attributes are built.
func BenchmarkSend_TracingOnSampledOut(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	benchmarkSend(b, tp)
}
