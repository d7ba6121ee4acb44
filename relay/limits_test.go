package relay_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// heldBySink is a slow sink that records the most rows and payload bytes it
// held at once.
type heldBySink struct {
	mu               sync.Mutex
	rows, bytes      int
	maxRows, maxByte int
}

func (h *heldBySink) sink(hold time.Duration) *sinktest.Func {
	return &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
		n := 0
		for _, m := range msgs {
			n += len(m.Payload)
		}
		h.mu.Lock()
		h.rows, h.bytes = h.rows+len(msgs), h.bytes+n
		h.maxRows, h.maxByte = max(h.maxRows, h.rows), max(h.maxByte, h.bytes)
		h.mu.Unlock()
		time.Sleep(hold)
		h.mu.Lock()
		h.rows, h.bytes = h.rows-len(msgs), h.bytes-n
		h.mu.Unlock()
		return make([]error, len(msgs))
	}}
}

// leasedPeak samples the rows leased in the hot table (claimed and not yet
// settled: in flight) until ctx ends, and returns the most rows and payload
// bytes seen at once.
func leasedPeak(ctx context.Context, b *bundle, maxRead int64) (rows, bytes *int, done <-chan struct{}) {
	rows, bytes = new(int), new(int)
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			var n, sum int
			// A payload over the budget is leased but never read: it
			// costs the relay nothing.
			err := b.db.Pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(octet_length(payload)) FILTER (WHERE octet_length(payload) <= $1), 0) FROM "+
				b.db.Table("messages")+" WHERE leased_by IS NOT NULL", maxRead).Scan(&n, &sum)
			if err == nil {
				*rows, *bytes = max(*rows, n), max(*bytes, sum)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return rows, bytes, ch
}

// insertSized inserts n rows whose payloads are size bytes each, each with
// a key of its own when keyed.
func insertSized(t *testing.T, b *bundle, n, size int, keyed bool) {
	t.Helper()
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key)
SELECT 'events.a', convert_to(repeat(chr(97 + i % 26), $1), 'UTF8'), CASE WHEN $3 THEN 'k-' || $1 || '-' || i END
  FROM generate_series(1, $2) AS i`, size, n, keyed)
}

// RELAY_MAX_IN_FLIGHT is a ceiling: never more rows claimed and unsettled,
// even with the sink slow and a long backlog.
func TestRelay_RowsInFlightNeverExceedMaxInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.BatchSize, cfg.MaxInFlight = 4, 10
	held := &heldBySink{}
	cfg.Sinks = map[string]sinks.Sink{"nats": held.sink(20 * time.Millisecond)}
	insertSized(t, b, 300, 100, false)
	ctx, cancel := context.WithCancel(context.Background())
	rows, _, sampled := leasedPeak(ctx, b, relay.MaxInFlightBytesDefault)
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.WaitDrained(t, b.db, relaytest.Budget(300))
	cancel()
	<-sampled
	if *rows > cfg.MaxInFlight || held.maxRows > cfg.MaxInFlight {
		t.Errorf("in flight at once: %d rows leased, %d in the sink; want at most RELAY_MAX_IN_FLIGHT=%d", *rows, held.maxRows, cfg.MaxInFlight)
	}
	if *rows < cfg.BatchSize {
		t.Errorf("at most %d rows were ever leased at once: the sampling saw no claim", *rows)
	}
}

// RELAY_MAX_IN_FLIGHT_BYTES bounds the payload bytes claimed and unsettled
// (the relay's memory), and a row larger than the whole budget is
// dead-lettered without its payload being read; in ordered mode too, where
// keyed rows are claimed as their keys' heads, and in partitioned mode,
// whose claims walk buckets. (The claims take their rows whole when they
// fit the budget, and count them up only when they do not: these rows do
// not.)
func TestRelay_PayloadBytesInFlightNeverExceedTheByteBudget(t *testing.T) {
	t.Parallel()
	for _, mode := range []outbox.Mode{outbox.ModeUnordered, outbox.ModeOrdered, outbox.ModePartitioned} {
		ordered := mode != outbox.ModeUnordered // keyed rows
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config(t)
			cfg.Mode = mode
			cfg.MaxInFlightBytes = 64 << 10 // two 30,000-byte rows fit, three do not
			held := &heldBySink{}
			cfg.Sinks = map[string]sinks.Sink{"nats": held.sink(20 * time.Millisecond)}
			insertSized(t, b, 60, 30_000, ordered)
			insertSized(t, b, 1, 100_000, ordered) // over the budget on its own
			insertSized(t, b, 20, 30_000, false)
			ctx, cancel := context.WithCancel(context.Background())
			_, bytes, sampled := leasedPeak(ctx, b, cfg.MaxInFlightBytes)
			relaytest.Start(t, b.db.Pool, cfg)
			// The sink holds every delivery 20 ms, and in ordered mode the
			// rows go one at a time (a 30,000-byte row fills the half of
			// the budget the claim of heads may take): about 70 ms a row
			// alone, 6 s in all, and past relaytest.Budget's 30 s once on
			// a loaded CI machine with the race detector.
			relaytest.WaitDrained(t, b.db, relaytest.Budget(81)+81*100*time.Millisecond)
			cancel()
			<-sampled
			if got := b.db.Count(t, "archive"); got != 80 {
				t.Errorf("archived %d rows, want the 80 within the budget", got)
			}
			var reason, msg string
			if err := b.db.Pool.QueryRow(context.Background(), "SELECT reason, error FROM "+b.db.Table("dead_letters")+" WHERE octet_length(payload) = 100000").Scan(&reason, &msg); err != nil {
				t.Fatalf("the row over the budget is not in the dead letters: %v", err)
			}
			if reason != "permanent" || !strings.Contains(msg, "payload of 100000 bytes exceeds RELAY_MAX_IN_FLIGHT_BYTES of 65536 bytes") {
				t.Errorf("the row over the budget was dead-lettered as %s: %s", reason, msg)
			}
			limit := int(cfg.MaxInFlightBytes)
			if held.maxByte > limit || *bytes > limit {
				t.Errorf("payload bytes in flight at once: %d leased, %d in the sink; want at most the budget %d",
					*bytes, held.maxByte, limit)
			}
			// The budget holds exactly: the sink never held three
			// 30,000-byte rows.
			if held.maxRows > 2 {
				t.Errorf("the sink held %d rows at once; two 30,000-byte rows fill a %d-byte budget", held.maxRows, limit)
			}
		})
	}
}
