package sqs_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	sqssink "github.com/outbox-relay/outbox-relay/sinks/sqs"
)

// BenchmarkDeliver_SQS compares the sink's Deliver with a bare loop written
// against the AWS SDK, in one run on one fauxqs emulator (a Node.js process
// beside this one), the two alternating (see alternate). One op is one
// batch of benchBatch messages of benchPayload bytes, each with a key
// (benchKeys per batch), an idempotency key and two headers. Every run
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

	sink := benchSide{name: "sink", prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
		s := newSink(b, srv, newQueue(b), func(c *sqssink.Config) {
			c.Timeout = 10 * time.Second
			c.Logger = slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		return func(ctx context.Context, msgs []sinks.Message) error { return failed(s.Deliver(ctx, msgs)) }
	}}
	bare := benchSide{name: "bare", prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
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
	alternate(b, sink, bare)
}

func stringAttribute(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
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
