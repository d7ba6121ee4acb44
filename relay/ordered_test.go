package relay_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// flakySink fails the first delivery of every third message, and records
// how many messages of each key it holds at once.
type flakySink struct {
	next sinks.Sink

	mu          sync.Mutex
	failed      map[string]bool
	inFlight    map[string]int
	maxInFlight int
}

func (s *flakySink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	s.mu.Lock()
	var send []sinks.Message
	var at []int
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if m.Key != "" {
			s.inFlight[m.Key]++
			s.maxInFlight = max(s.maxInFlight, s.inFlight[m.Key])
		}
		seq, _ := strconv.Atoi(m.IdempotencyKey)
		if seq%3 == 0 && !s.failed[m.IdempotencyKey] {
			s.failed[m.IdempotencyKey] = true
			errs[i] = errors.New("flaky: try again")
			continue
		}
		send = append(send, m)
		at = append(at, i)
	}
	s.mu.Unlock()
	for j, err := range s.next.Deliver(ctx, send) {
		errs[at[j]] = err
	}
	s.mu.Lock()
	for _, m := range msgs {
		if m.Key != "" {
			s.inFlight[m.Key]--
		}
	}
	s.mu.Unlock()
	return errs
}

func TestRelay_OrderedModeDeliversEachKeyInInsertOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.Ordered = true
	cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 50*time.Millisecond
	flaky := &flakySink{next: b.sink, failed: map[string]bool{}, inFlight: map[string]int{}}
	cfg.Sinks = map[string]sinks.Sink{"nats": flaky}
	// 5 keys interleaved, 100 rows each, plus unkeyed rows; the idempotency
	// key is the insert sequence.
	b.db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, idempotency_key)
SELECT 'events.ordered', convert_to(i::text, 'UTF8'), CASE WHEN i % 6 = 5 THEN NULL ELSE 'k' || (i % 6) END, i::text
  FROM generate_series(1, 600) AS i`)
	start(t, b, cfg)
	relaytest.WaitDrained(t, b.db, 60*time.Second)

	last := map[string]int{}
	for _, m := range b.nats.Messages(t, stream) {
		seq, _ := strconv.Atoi(m.Header.Get(nats.MsgIdHdr))
		key := "k" + strconv.Itoa(seq%6)
		if seq%6 == 5 {
			continue // unkeyed
		}
		if seq < last[key] {
			t.Fatalf("key %s: message %d arrived after %d", key, seq, last[key])
		}
		last[key] = seq
	}
	if len(last) != 5 {
		t.Fatalf("saw %d keys, want 5", len(last))
	}
	if flaky.maxInFlight != 1 {
		t.Errorf("up to %d messages of one key were in flight at once, want 1", flaky.maxInFlight)
	}
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, 600)
}

func TestRelay_OrderedModeHoldsBackTheRowsBehindAFailingHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.Ordered = true
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	start(t, b, cfg)
	// No stream captures nowhere.>: the head fails and waits an hour.
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'nowhere.x', 'x', 'k' FROM generate_series(1, 5)`)
	relaytest.WaitFor(t, 20*time.Second, "the head to be in backoff", func() bool {
		var n int
		_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+b.db.Table("messages")+" WHERE attempts = 1 AND leased_by IS NULL").Scan(&n)
		return n == 1
	})
	var due int
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+b.db.Table("messages")+" WHERE available_at <= now()").Scan(&due); err != nil {
		t.Fatal(err)
	}
	if due != 0 {
		t.Errorf("%d rows behind the failing head are still due: claims would walk past them", due)
	}
}
