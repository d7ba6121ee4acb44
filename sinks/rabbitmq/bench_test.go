package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks/rabbitmq"
)

// BenchmarkDrainBacklog_RabbitMQ measures the relay's drain rate of a
// backlog of 100,000 rows with 256-byte payloads, written with plain SQL
// (two headers each, every fourth keyed, as relay's benchmark writes them),
// to the machine's RabbitMQ: persistent messages, publisher confirms, one
// durable classic queue bound to amq.topic. The relay runs with its default
// settings. The broker and PostgreSQL share the machine's CPUs with this
// process: compare runs made on one machine in one session, such as this
// one beside relay's JetStream benchmark:
//
//	go test -run '^$' -bench DrainBacklog_RabbitMQ -benchtime 3x ./sinks/rabbitmq/
//	go test -run '^$' -bench DrainBacklog -benchtime 3x ./relay/
func BenchmarkDrainBacklog_RabbitMQ(b *testing.B) {
	const rows = 100000
	db := dbtest.New(b)
	v := rabbitmqtest.New(b)
	v.BindQueue(b, queue, rabbitmq.ExchangeDefault, "events.#", nil)
	s := newSink(b, v, func(c *rabbitmq.Config) { c.ConfirmTimeout = rabbitmq.ConfirmTimeoutDefault })
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		v.Purge(b, queue)
		db.Exec(b, `
INSERT INTO %s.messages (topic, payload, key, headers)
SELECT 'events.orders.created',
       convert_to(rpad(json_build_object('seq', i)::text, 256, ' '), 'UTF8'),
       CASE WHEN i % 4 = 0 THEN 'order-' || (i % 100) END,
       jsonb_build_object('content-type', 'application/json', 'traceparent', '00-' || lpad(to_hex(i), 32, '0') || '-00f067aa0ba902b7-01')
  FROM generate_series(1, $1) AS i`, rows)
		db.Exec(b, "ANALYZE %s.messages")
		b.StartTimer()
		began := time.Now()
		cfg := relayConfig(b, db, s)
		// The engine's defaults, as the binary runs without settings.
		cfg.PollInterval, cfg.Lease, cfg.BackoffMin, cfg.BackoffMax, cfg.DrainTimeout = 0, 0, 0, 0, 0
		_, stop := relaytest.Start(b, db.Pool, cfg)
		waitfor.Condition(b, 10*time.Minute, "the backlog to drain", func() bool {
			return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("rabbitmq", "delivered")) >= rows
		})
		total += time.Since(began)
		b.StopTimer()
		stop()
		if n := v.Count(b, queue); n < rows {
			b.Fatalf("the queue holds %d messages after %d were confirmed", n, rows)
		}
		if n := db.Count(b, "messages"); n != 0 {
			b.Fatalf("%d rows left in the hot table", n)
		}
	}
	b.ReportMetric(float64(rows*b.N)/total.Seconds(), "events/s")
}
