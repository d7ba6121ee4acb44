package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/testkit/redistest"
	"github.com/outbox-relay/outbox-relay/sinks"
	redissink "github.com/outbox-relay/outbox-relay/sinks/redis"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// BenchmarkDeliver_Redis compares the sink's Deliver with a bare loop
// written against go-redis, in one run on one redis-server (started for
// the benchmark, without persistence), the two alternating (see
// sinktest.Alternate). One op is one batch of
// sinktest.BenchBatch messages (1 KiB each, each with one of sinktest.BenchKeys keys,
// an idempotency key and two headers). The bare loop appends the same entries (the same fields, one
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

	sink := sinktest.BenchSide{Name: "sink", Prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
		srv.FlushAll(b)
		return func(ctx context.Context, msgs []sinks.Message) error {
			return sinktest.FirstError(s.Deliver(ctx, msgs))
		}
	}}
	bare := sinktest.BenchSide{Name: "bare", Prepare: func(b *testing.B) func(context.Context, []sinks.Message) error {
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
	sinktest.Alternate(b, sink, bare)
}
