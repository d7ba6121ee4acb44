package sinktest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// The batch the sinks' Deliver benchmarks hand both sides: what the relay
// hands a sink.
const (
	BenchBatch   = 100  // messages per Deliver
	BenchPayload = 1024 // bytes per payload
	BenchKeys    = 10   // ordering keys per batch
	BenchTopic   = "orders.created"
)

// How the sink and the bare loop take turns: benchWarmBatches batches
// each, untimed, then benchRounds timed runs each, alternating, the side
// that goes first swapping every round. Run with -count 1: -count repeats
// each sub-benchmark in a row, which would not alternate.
const (
	benchRounds      = 5
	benchWarmBatches = 100
)

// BenchSide is one way of delivering a batch in a benchmark that compares
// a sink with a bare loop written against its broker's client. Prepare
// readies a run (a fresh destination, untimed) and returns the delivery of
// one batch.
type BenchSide struct {
	Name    string
	Prepare func(b *testing.B) func(ctx context.Context, msgs []sinks.Message) error
}

// Alternate warms both sides up, then runs them as sub-benchmarks (sink,
// bare, bare#01, sink#01, …), each op one batch of BenchBatch messages,
// reporting msgs/s. A run's batches are made before its timer starts.
func Alternate(b *testing.B, sink, bare BenchSide) {
	payload := benchPayloadBytes()
	ctx := context.Background()
	for _, side := range []BenchSide{sink, bare} {
		deliver := side.Prepare(b)
		var seq int
		for range benchWarmBatches {
			if err := deliver(ctx, benchMessages(&seq, payload)); err != nil {
				b.Fatalf("warm up %s: %v", side.Name, err)
			}
		}
	}
	for round := range benchRounds {
		order := []BenchSide{sink, bare}
		if round%2 == 1 {
			order[0], order[1] = bare, sink
		}
		for _, side := range order {
			b.Run(side.Name, func(b *testing.B) {
				deliver := side.Prepare(b)
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
				b.ReportMetric(float64(b.N*BenchBatch)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// FirstError returns the first error of a Deliver's errs with its
// message's index, or nil: a benchmark's sink side as a BenchSide delivery.
func FirstError(errs []error) error {
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	return nil
}

// benchPayloadBytes returns a JSON payload of BenchPayload bytes.
func benchPayloadBytes() []byte {
	p := `{"order_id":"42","note":"` + strings.Repeat("x", BenchPayload) + `"}`
	return []byte(p[:BenchPayload-2] + `"}`)
}

// benchMessages returns the next batch: each message shares payload, has
// one of BenchKeys keys and an idempotency key and traceparent of its own.
func benchMessages(seq *int, payload []byte) []sinks.Message {
	msgs := make([]sinks.Message, BenchBatch)
	for i := range msgs {
		*seq++
		msgs[i] = sinks.Message{
			Message: outbox.Message{
				Topic:          BenchTopic,
				Payload:        payload,
				Key:            fmt.Sprintf("order-%d", i%BenchKeys),
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
