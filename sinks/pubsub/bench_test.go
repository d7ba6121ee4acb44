package pubsub_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ps "cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/api/option/internaloption"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/outbox-relay/outbox-relay/internal/testkit/pubsubtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	pubsubsink "github.com/outbox-relay/outbox-relay/sinks/pubsub"
)

// BenchmarkDeliver_PubSub compares the sink's Deliver with a bare loop
// written against the Pub/Sub client, in one run on one pstest fake in
// this process, the two alternating (see alternate). One op is one batch
// of benchBatch messages of benchPayload bytes, each with a key (benchKeys
// per batch), an idempotency key and two headers. The bare loop publishes
// the same messages (data, the headers and the sink's two attributes, the
// key as ordering key) on one Publisher with message ordering on and the
// sink's publish settings (a 1 ms delay threshold rather than the
// library's 10 ms: the relay batches already), then Gets every result; it
// has none of the sink's checks, no per-key bookkeeping and no resume of
// paused keys. Every run starts on an emptied fake. pstest keeps every
// message in memory and shares this process's CPUs: compare the ratio of
// the two, not machines.
//
//	go test -run '^$' -bench Deliver_PubSub -benchtime 300x ./sinks/pubsub/
func BenchmarkDeliver_PubSub(b *testing.B) {
	srv := pubsubtest.Start(b)
	srv.CreateTopic(b, prefix+benchTopic)
	s := newSink(b, srv, nil)
	client, err := ps.NewClient(context.Background(), pubsubtest.Project,
		option.WithEndpoint(srv.Addr()),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		internaloption.SkipDialSettingsValidation(),
	)
	if err != nil {
		b.Fatal(err)
	}
	pub := client.Publisher(pubsubtest.TopicName(prefix + benchTopic))
	pub.EnableMessageOrdering = true
	pub.PublishSettings.DelayThreshold = time.Millisecond
	pub.PublishSettings.CountThreshold = ps.MaxPublishRequestCount
	pub.PublishSettings.ByteThreshold = 1 << 20
	pub.PublishSettings.Timeout = 10 * time.Second
	b.Cleanup(func() {
		pub.Stop()
		_ = client.Close()
	})

	sink := benchSide{name: "sink", prepare: func(*testing.B) func(context.Context, []sinks.Message) error {
		srv.Purge()
		return func(ctx context.Context, msgs []sinks.Message) error { return failed(s.Deliver(ctx, msgs)) }
	}}
	bare := benchSide{name: "bare", prepare: func(*testing.B) func(context.Context, []sinks.Message) error {
		srv.Purge()
		return func(ctx context.Context, msgs []sinks.Message) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			results := make([]*ps.PublishResult, len(msgs))
			for i := range msgs {
				m := &msgs[i]
				attrs := make(map[string]string, len(m.Headers)+2)
				for k, v := range m.Headers {
					attrs[k] = v
				}
				attrs[pubsubsink.IdempotencyKeyAttribute] = m.IdempotencyKey
				attrs[pubsubsink.TopicAttribute] = m.Topic
				results[i] = pub.Publish(ctx, &ps.Message{Data: m.Payload, Attributes: attrs, OrderingKey: m.Key})
			}
			for i, r := range results {
				if _, err := r.Get(ctx); err != nil {
					return fmt.Errorf("message %d: %w", i, err)
				}
			}
			return nil
		}
	}}
	alternate(b, sink, bare)
}

// The batch the benchmarks deliver: what the relay hands a sink.
const (
	benchBatch   = 100  // messages per Deliver
	benchPayload = 1024 // bytes per payload
	benchKeys    = 10   // ordering keys per batch
	benchTopic   = "orders.created"
)

// How the sink and the bare loop take turns: benchWarmBatches batches
// each, untimed, then benchRounds timed runs each, alternating, the side
// that goes first swapping every round. Run with -count 1: -count repeats
// each sub-benchmark in a row, which would not alternate.
const (
	benchRounds      = 5
	benchWarmBatches = 100
)

// benchSide is one way of delivering a batch. prepare readies a run (a
// fresh destination, untimed) and returns the delivery of one batch.
type benchSide struct {
	name    string
	prepare func(b *testing.B) func(ctx context.Context, msgs []sinks.Message) error
}

// alternate warms both sides up, then runs them as sub-benchmarks
// (sink, bare, bare#01, sink#01, …), each op one batch, reporting msgs/s.
// A run's batches are made before its timer starts.
func alternate(b *testing.B, sink, bare benchSide) {
	payload := benchPayloadBytes()
	ctx := context.Background()
	for _, side := range []benchSide{sink, bare} {
		deliver := side.prepare(b)
		var seq int
		for range benchWarmBatches {
			if err := deliver(ctx, benchMessages(&seq, payload)); err != nil {
				b.Fatalf("warm up %s: %v", side.name, err)
			}
		}
	}
	for round := range benchRounds {
		order := []benchSide{sink, bare}
		if round%2 == 1 {
			order[0], order[1] = bare, sink
		}
		for _, side := range order {
			b.Run(side.name, func(b *testing.B) {
				deliver := side.prepare(b)
				var seq int
				batches := make([][]sinks.Message, b.N)
				for i := range batches {
					batches[i] = benchMessages(&seq, payload)
				}
				b.ResetTimer()
				for _, msgs := range batches {
					if err := deliver(ctx, msgs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// benchPayloadBytes returns a JSON payload of benchPayload bytes.
func benchPayloadBytes() []byte {
	p := `{"order_id":"42","note":"` + strings.Repeat("x", benchPayload) + `"}`
	return []byte(p[:benchPayload-2] + `"}`)
}

// benchMessages returns the next batch: each message shares payload, has
// one of benchKeys keys and an idempotency key and traceparent of its own.
func benchMessages(seq *int, payload []byte) []sinks.Message {
	msgs := make([]sinks.Message, benchBatch)
	for i := range msgs {
		*seq++
		msgs[i] = sinks.Message{
			Message: outbox.Message{
				Topic:          benchTopic,
				Payload:        payload,
				Key:            fmt.Sprintf("order-%d", i%benchKeys),
				IdempotencyKey: fmt.Sprintf("bench-%d", *seq),
				Headers: map[string]string{
					"content-type": "application/json",
					"traceparent":  fmt.Sprintf("00-%032x-00f067aa0ba902b7-01", *seq),
				},
			},
			ID:      int64(*seq),
			Attempt: 1,
		}
	}
	return msgs
}

// failed returns the first error of errs with its message's index, or nil.
func failed(errs []error) error {
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	return nil
}
