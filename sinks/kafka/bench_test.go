package kafka_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
)

// BenchmarkDrainBacklog_Kafka measures the relay's drain rate of a backlog
// of rows written with plain SQL, with the relay's default settings, into
// an in-process kfake cluster of three brokers (which shares this process's
// CPU: compare runs made together, not machines). The relay is the engine
// only here (it never imports a sink), and this benchmark lives with the
// sink it measures.
//
// rows=100000/payload=256 is a 100k-row backlog of 256-byte payloads with
// two headers, every fourth row keyed; relaytest=20000 drains exactly the
// rows of relay's BenchmarkRelay_DrainBacklog (JetStream), for a ratio of
// the two sinks from one session:
//
//	go test -run '^$' -bench 'DrainBacklog' -benchtime 1x ./sinks/kafka/ ./relay/
func BenchmarkDrainBacklog_Kafka(b *testing.B) {
	b.Run("rows=100000/payload=256", func(b *testing.B) {
		benchDrain(b, 100000, func(db *dbtest.Schema, n int) {
			db.Exec(b, `
INSERT INTO %s.messages (topic, payload, key, headers)
SELECT 'orders.created',
       convert_to(rpad(json_build_object('seq', i)::text, 256, ' '), 'UTF8'),
       CASE WHEN i % 4 = 0 THEN 'order-' || (i % 1000) END,
       jsonb_build_object('content-type', 'application/json', 'traceparent', '00-' || lpad(to_hex(i), 32, '0') || '-00f067aa0ba902b7-01')
  FROM generate_series(1, $1) AS i`, n)
		})
	})
	b.Run("relaytest=20000", func(b *testing.B) {
		benchDrain(b, 20000, func(db *dbtest.Schema, n int) { relaytest.InsertRows(b, db, n, "orders.created") })
	})
}

// benchDrain times the relay draining n rows that insert writes, b.N
// times, each into a fresh cluster and schema, and reports events/s.
func benchDrain(b *testing.B, n int, insert func(db *dbtest.Schema, n int)) {
	var total time.Duration
	for range b.N {
		b.StopTimer()
		db := dbtest.New(b)
		c := kafkatest.Start(b)
		c.CreateTopic(b, "orders.created", 8)
		log, _ := testlog.New(b, slog.LevelWarn)
		s, err := kafkasink.New(kafkasink.Config{Brokers: c.Brokers(), Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		waitfor.Condition(b, 15*time.Second, "the sink to reach the cluster", func() bool { return s.Available() == nil })
		insert(db, n)
		db.Exec(b, "ANALYZE %s.messages")
		cfg := relay.Config{Schema: db.Name, Sinks: map[string]sinks.Sink{"kafka": s}, Logger: log, Metrics: relay.NewMetrics()}

		b.StartTimer()
		began := time.Now()
		_, stop := relaytest.Start(b, db.Pool, cfg)
		waitfor.Condition(b, 5*time.Minute, "the backlog to drain", func() bool {
			return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("kafka", "delivered")) >= float64(n)
		})
		total += time.Since(began)
		b.StopTimer()

		stop()
		_ = s.Close()
		if got := len(c.Records(b, "orders.created")); got < n {
			b.Errorf("Kafka holds %d records, want %d", got, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
}
