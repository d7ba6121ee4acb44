package pubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ps "cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/api/option/internaloption"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/outbox-relay/outbox-relay/internal/testkit/pubsubtest"
	"github.com/outbox-relay/outbox-relay/sinks"
	pubsubsink "github.com/outbox-relay/outbox-relay/sinks/pubsub"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// BenchmarkDeliver_PubSub compares the sink's Deliver with a bare loop
// written against the Pub/Sub client, in one run on one pstest fake in
// this process, the two alternating (see sinktest.Alternate). One op is one batch of
// sinktest.BenchBatch messages (1 KiB each, each with one of sinktest.BenchKeys keys,
// an idempotency key and two headers). The bare loop publishes
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
	srv.CreateTopic(b, prefix+sinktest.BenchTopic)
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
	pub := client.Publisher(pubsubtest.TopicName(prefix + sinktest.BenchTopic))
	pub.EnableMessageOrdering = true
	pub.PublishSettings.DelayThreshold = time.Millisecond
	pub.PublishSettings.CountThreshold = ps.MaxPublishRequestCount
	pub.PublishSettings.ByteThreshold = 1 << 20
	pub.PublishSettings.Timeout = 10 * time.Second
	b.Cleanup(func() {
		pub.Stop()
		_ = client.Close()
	})

	sink := sinktest.BenchSide{Name: "sink", Prepare: func(*testing.B) func(context.Context, []sinks.Message) error {
		srv.Purge()
		return func(ctx context.Context, msgs []sinks.Message) error {
			return sinktest.FirstError(s.Deliver(ctx, msgs))
		}
	}}
	bare := sinktest.BenchSide{Name: "bare", Prepare: func(*testing.B) func(context.Context, []sinks.Message) error {
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
	sinktest.Alternate(b, sink, bare)
}
