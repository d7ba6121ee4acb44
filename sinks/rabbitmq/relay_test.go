package rabbitmq_test

// These tests run the engine (package relay) with the sink: the sink's
// package never imports relay, its tests may.

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/rabbitmq"
)

// relayConfig returns the config of a relay delivering db's rows to s,
// with test-friendly timings.
func relayConfig(t testing.TB, db *dbtest.Schema, s sinks.Sink) relay.Config {
	log, _ := testlog.New(t, slog.LevelWarn)
	return relay.Config{
		Schema:       db.Name,
		Sinks:        map[string]sinks.Sink{"rabbitmq": s},
		PollInterval: 10 * time.Millisecond,
		Lease:        10 * time.Second,
		BackoffMin:   50 * time.Millisecond,
		BackoffMax:   500 * time.Millisecond,
		DrainTimeout: 2 * time.Second,
		Logger:       log,
		Metrics:      relay.NewMetrics(),
	}
}

func TestRelay_NothingLostWhileTheBrokerDropsConnections(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	v := rabbitmqtest.New(t)
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, "events.#", nil)
	s := newSink(t, v, func(c *rabbitmq.Config) { c.ConfirmTimeout = 5 * time.Second })
	const n = 20000
	relaytest.InsertRows(t, db, n, "events.orders.created")
	cfg := relayConfig(t, db, s)
	cfg.BatchSize = 200
	relaytest.Start(t, db.Pool, cfg)

	closes := 0
	for i := 1; i <= 5; i++ {
		waitfor.Condition(t, relaytest.Budget(n), fmt.Sprintf("%d rows archived", i*n/7), func() bool { return db.Count(t, "archive") >= i*n/7 })
		if db.Count(t, "messages_all") == 0 {
			break
		}
		v.CloseConnections(t, fmt.Sprintf("outbox-relay test: close %d", i))
		closes++
	}
	if closes < 2 {
		t.Fatalf("the relay drained the table after %d broker-side closes: the test proves nothing", closes)
	}
	relaytest.WaitDrained(t, db, relaytest.Budget(n))

	archived := relaytest.Archive(t, db, "true")
	if len(archived) != n {
		t.Fatalf("archive holds %d delivered rows, want %d", len(archived), n)
	}
	got := v.WaitTake(t, queue, n, relaytest.Budget(n))
	seen := map[string]amqp.Delivery{}
	for _, d := range got {
		if prev, dup := seen[d.MessageId]; dup && !bytes.Equal(prev.Body, d.Body) {
			t.Fatalf("two copies of %s differ", d.MessageId)
		}
		seen[d.MessageId] = d
	}
	lost := 0
	for key, row := range archived {
		d, ok := seen[key]
		if !ok {
			lost++
			continue
		}
		if !bytes.Equal(d.Body, row.Payload) {
			t.Fatalf("message %s: body %q, want the row's payload %q", key, d.Body, row.Payload)
		}
		if d.ContentType != row.Headers["content-type"] || d.Headers["traceparent"] != row.Headers["traceparent"] {
			t.Fatalf("message %s: content_type %q and headers %v, want the row's headers %v", key, d.ContentType, d.Headers, row.Headers)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d rows archived as delivered are not in the queue", lost, n)
	}
	t.Logf("%d rows, %d broker-side closes, %d messages in the queue (%d duplicates)", n, closes, len(got), len(got)-len(seen))
}
