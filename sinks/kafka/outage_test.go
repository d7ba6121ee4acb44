package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestSink_ClusterKilledMidRunLosesNothing delivers a stream of batches,
// retrying failures as the relay does, while every broker is killed and
// later started again from its data: every message reported delivered is in
// Kafka afterwards, and every message is delivered in the end.
func TestSink_ClusterKilledMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, 3)
	s := newSink(t, c, nil)

	const n, batch = 600, 20
	msgs := sinktest.Messages(t, n)
	for i := range msgs {
		if i%3 == 0 {
			msgs[i].Key = "order-" + string(rune('a'+i%7))
		}
	}
	var (
		mu        sync.Mutex
		delivered = map[string]bool{}
		failures  int
		problems  []string
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		queue := append([]sinks.Message(nil), msgs...)
		deadline := time.Now().Add(2 * time.Minute)
		for len(queue) > 0 && time.Now().Before(deadline) {
			b := queue[:min(batch, len(queue))]
			queue = queue[len(b):]
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			errs := s.Deliver(ctx, b)
			cancel()
			mu.Lock()
			for i, err := range errs {
				switch {
				case err == nil:
					delivered[b[i].IdempotencyKey] = true
				case sinks.IsPermanent(err):
					problems = append(problems, "permanent failure in an outage: "+err.Error())
				default:
					failures++
					b[i].Attempt++
					queue = append(queue, b[i]) // retried later, as the relay does
				}
			}
			mu.Unlock()
			if len(errs) > 0 && errs[0] != nil && errors.Is(errs[0], sinks.ErrNotAttempted) {
				// The relay does not claim for an unavailable sink: wait.
				for s.Available() != nil && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
	}()
	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered), failures
	}

	waitfor.Condition(t, 30*time.Second, "a third of the messages delivered", func() bool { d, _ := count(); return d >= n/3 })
	c.Stop()
	waitfor.Condition(t, 15*time.Second, "Available to report the outage", func() bool { return s.Available() != nil })
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("Available while every broker is down: %v, want an error wrapping sinks.ErrNotAttempted", err)
	}
	d, _ := count()
	t.Logf("cluster stopped with %d of %d messages delivered", d, n)

	c.Restart()
	waitfor.Condition(t, 30*time.Second, "the sink to see the cluster again", func() bool { return s.Available() == nil })
	<-done
	d, f := count()
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	mu.Unlock()
	if d != n {
		t.Fatalf("%d of %d messages delivered after the restart", d, n)
	}

	got := waitRecords(t, c, msgs)
	copies := 0
	for _, m := range msgs {
		copies += len(got[m.IdempotencyKey])
		for _, r := range got[m.IdempotencyKey] {
			if !bytes.Equal(r.Value, m.Payload) || string(r.Key) != m.Key {
				t.Errorf("%s: a copy with value %q key %q", m.IdempotencyKey, r.Value, r.Key)
			}
		}
	}
	t.Logf("%d deliveries failed during the outage and were retried; Kafka holds %d records for %d messages (a retried message may be there twice, both copies with its %s)",
		f, copies, n, kafkasink.IdempotencyKeyHeader)
}
