package sqs_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	sqssink "github.com/outbox-relay/outbox-relay/sinks/sqs"
)

// BenchmarkDeliver_SQS compares the sink's Deliver with a bare loop written
// against the AWS SDK, in one run on one fauxqs emulator (a Node.js process
// beside this one), the two alternating (see sinktest.Alternate). One op is one batch of
// sinktest.BenchBatch messages (1 KiB each, each with one of sinktest.BenchKeys keys,
// an idempotency key and two headers). Every run
// sends to a FIFO queue of its own (the sink's, with SQS_QUEUE_URL naming
// it, read before the run). The bare loop sends the same messages (the
// payload as body, the headers and the sink's two attributes, the key as
// MessageGroupId and the idempotency key as MessageDeduplicationId) in
// SendMessageBatch requests of 10, one after the other as the sink sends a
// queue's batches, and checks every entry; it has none of the sink's
// checks or encodings. The emulator shares the machine's CPUs with this
// process: compare the ratio of the two, not machines.
//
//	go test -run '^$' -bench Deliver_SQS -benchtime 100x ./sinks/sqs/
func BenchmarkDeliver_SQS(b *testing.B) {
	srv := sqstest.Start(b)
	cl := srv.Client()
	queues := 0
	newQueue := func(b *testing.B) string {
		queues++
		return srv.CreateQueue(b, "bench-"+strconv.Itoa(queues)+".fifo", nil)
	}

	sink := sinktest.BenchSide{Name: "sink", Prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
		s := newSink(b, srv, newQueue(b), func(c *sqssink.Config) {
			c.Timeout = 10 * time.Second
			c.Logger = slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		return func(ctx context.Context, msgs []sinks.Message) error {
			return sinktest.FirstError(s.Deliver(ctx, msgs))
		}
	}}
	bare := sinktest.BenchSide{Name: "bare", Prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
		u := aws.String(newQueue(b))
		return func(ctx context.Context, msgs []sinks.Message) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			for start := 0; start < len(msgs); start += sqssink.MaxBatchEntries {
				in := &sqs.SendMessageBatchInput{QueueUrl: u}
				for j, m := range msgs[start:min(start+sqssink.MaxBatchEntries, len(msgs))] {
					attrs := make(map[string]types.MessageAttributeValue, len(m.Headers)+2)
					for k, v := range m.Headers {
						attrs[k] = stringAttribute(v)
					}
					attrs[sqssink.IdempotencyKeyAttribute] = stringAttribute(m.IdempotencyKey)
					attrs[sqssink.TopicAttribute] = stringAttribute(m.Topic)
					in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
						Id:                     aws.String(strconv.Itoa(j)),
						MessageBody:            aws.String(string(m.Payload)),
						MessageAttributes:      attrs,
						MessageGroupId:         aws.String(m.Key),
						MessageDeduplicationId: aws.String(m.IdempotencyKey),
					})
				}
				out, err := cl.SendMessageBatch(ctx, in)
				if err != nil {
					return err
				}
				if len(out.Failed) > 0 || len(out.Successful) != len(in.Entries) {
					return fmt.Errorf("%d of %d entries failed", len(in.Entries)-len(out.Successful), len(in.Entries))
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
