package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/testkit/redistest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	redissink "github.com/outbox-relay/outbox-relay/sinks/redis"
)

// BenchmarkDeliver_Redis compares the sink's Deliver with a bare loop
// written against go-redis, in one run on one redis-server (started for
// the benchmark, without persistence), the two alternating (see
// alternate). One op is one batch of benchBatch messages of benchPayload
// bytes, each with a key (benchKeys per batch), an idempotency key and two
// headers. The bare loop appends the same entries (the same fields, one
// XADD per message in one pipeline on one connection) and checks each
// reply, with none of the sink's checks. Every run starts on an empty
// server. The server shares the machine's CPUs with this process: compare
// the ratio of the two, not machines.
//
//	go test -run '^$' -bench Deliver_Redis -benchtime 500x ./sinks/redis/
func BenchmarkDeliver_Redis(b *testing.B) {
	srv := redistest.Start(b)
	s := newSink(b, srv, nil)
	cl := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	b.Cleanup(func() { _ = cl.Close() })

	sink := benchSide{name: "sink", prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
		srv.FlushAll(b)
		return func(ctx context.Context, msgs []sinks.Message) error { return failed(s.Deliver(ctx, msgs)) }
	}}
	bare := benchSide{name: "bare", prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
		srv.FlushAll(b)
		return func(ctx context.Context, msgs []sinks.Message) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			pipe := cl.Pipeline()
			cmds := make([]*goredis.StringCmd, len(msgs))
			for i := range msgs {
				m := &msgs[i]
				values := []any{
					redissink.FieldPayload, m.Payload,
					redissink.FieldIdempotencyKey, m.IdempotencyKey,
					redissink.FieldTopic, m.Topic,
					redissink.FieldKey, m.Key,
				}
				for k, v := range m.Headers {
					values = append(values, redissink.HeaderFieldPrefix+k, v)
				}
				cmds[i] = pipe.XAdd(ctx, &goredis.XAddArgs{Stream: prefix + m.Topic, ID: "*", Values: values})
			}
			_, _ = pipe.Exec(ctx)
			for i, cmd := range cmds {
				if err := cmd.Err(); err != nil {
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
