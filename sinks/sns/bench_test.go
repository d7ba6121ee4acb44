package sns_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	snssink "github.com/outbox-relay/outbox-relay/sinks/sns"
)

// BenchmarkDeliver_SNS compares the sink's Deliver with a bare loop
// written against the AWS SDK, in one run on one fauxqs emulator (a
// Node.js process beside this one), the two alternating (see
// sinktest.Alternate). One op is one batch of sinktest.BenchBatch messages
// (1 KiB each, each with one of sinktest.BenchKeys keys, an idempotency key
// and two headers). Every run publishes to a FIFO topic of its own, which a
// FIFO queue subscribes to with raw message delivery (as sqstest's
// CreateTopic makes it), so that the emulator does the same fan-out work
// for both sides. The bare loop publishes the same messages (the payload
// as message, the headers and the sink's two attributes, the key as
// MessageGroupId and the idempotency key as MessageDeduplicationId) in
// PublishBatch requests of 10, one after the other, and checks every
// entry; it has none of the sink's checks or encodings, and sends 10
// entries a request where the sink sends 9 to a FIFO topic (its
// deliverTopic says why). The emulator shares the machine's CPUs with
// this process: compare the ratio of the two, not machines.
//
//	go test -run '^$' -bench Deliver_SNS -benchtime 100x ./sinks/sns/
func BenchmarkDeliver_SNS(b *testing.B) {
	srv := sqstest.Start(b)
	cl := srv.SNSClient()
	topics := 0
	newTopic := func(b *testing.B) string {
		topics++
		arn, _ := srv.CreateTopic(b, "bench-"+strconv.Itoa(topics)+".fifo")
		return arn
	}

	sink := sinktest.BenchSide{Name: "sink", Prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
		s := newSink(b, srv, newTopic(b), func(c *snssink.Config) {
			c.Timeout = 10 * time.Second
			c.Logger = slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		return func(ctx context.Context, msgs []sinks.Message) error {
			return sinktest.FirstError(s.Deliver(ctx, msgs))
		}
	}}
	bare := sinktest.BenchSide{Name: "bare", Prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
		arn := aws.String(newTopic(b))
		return func(ctx context.Context, msgs []sinks.Message) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			for start := 0; start < len(msgs); start += snssink.MaxBatchEntries {
				in := &sns.PublishBatchInput{TopicArn: arn}
				for j, m := range msgs[start:min(start+snssink.MaxBatchEntries, len(msgs))] {
					attrs := make(map[string]types.MessageAttributeValue, len(m.Headers)+2)
					for k, v := range m.Headers {
						attrs[k] = stringAttribute(v)
					}
					attrs[snssink.IdempotencyKeyAttribute] = stringAttribute(m.IdempotencyKey)
					attrs[snssink.TopicAttribute] = stringAttribute(m.Topic)
					in.PublishBatchRequestEntries = append(in.PublishBatchRequestEntries, types.PublishBatchRequestEntry{
						Id:                     aws.String(strconv.Itoa(j)),
						Message:                aws.String(string(m.Payload)),
						MessageAttributes:      attrs,
						MessageGroupId:         aws.String(m.Key),
						MessageDeduplicationId: aws.String(m.IdempotencyKey),
					})
				}
				out, err := cl.PublishBatch(ctx, in)
				if err != nil {
					return err
				}
				if len(out.Failed) > 0 || len(out.Successful) != len(in.PublishBatchRequestEntries) {
					return fmt.Errorf("%d of %d entries failed", len(in.PublishBatchRequestEntries)-len(out.Successful), len(in.PublishBatchRequestEntries))
				}
			}
			return nil
		}
	}}
	sinktest.Alternate(b, sink, bare)
}

func stringAttribute(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}
