package relay_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// BenchmarkRelay_DrainBacklog measures the drain rate of a backlog of rows
// written with plain SQL, with the default settings, into an in-process
// JetStream server (which shares this process's CPU: compare runs of this
// benchmark, not machines). The `bench` subcommand measures against real
// servers, beside ../shared/refloop.
//
//	go test -run '^$' -bench DrainBacklog -benchtime 3x ./relay/
func BenchmarkRelay_DrainBacklog(b *testing.B) {
	const rows = 20000
	bb := setup(b)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		relaytest.InsertRows(b, bb.db, rows, "events.orders.created")
		bb.db.Exec(b, "ANALYZE %s.messages")
		cfg := relay.Config{Schema: bb.db.Name, Sinks: map[string]sinks.Sink{"nats": bb.sink}, Logger: testLogger(b), Metrics: relay.NewMetrics()}
		b.StartTimer()
		began := time.Now()
		stop := start(b, bb, cfg)
		relaytest.WaitFor(b, 5*time.Minute, "the backlog to drain", func() bool {
			return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("nats", "delivered")) >= rows
		})
		total += time.Since(began)
		b.StopTimer()
		stop()
	}
	b.ReportMetric(float64(rows*b.N)/total.Seconds(), "events/s")
}
