package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/relay"
)

// histogramCount returns how many observations a histogram (or every series
// of a histogram vector) has.
func histogramCount(t *testing.T, c prometheus.Collector) uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

func TestMetrics_TellHowFarBehindAndWhy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.StatsInterval = 50 * time.Millisecond
	cfg.MaxAttempts = 2
	// Long enough that the failed row is seen waiting in backoff however
	// slow a refresh of the gauges is on a loaded machine.
	cfg.BackoffMin, cfg.BackoffMax = 3*time.Second, 3*time.Second
	m := cfg.Metrics
	if err := m.Register(prometheus.NewPedanticRegistry()); err != nil {
		t.Fatalf("metrics do not register cleanly: %v", err)
	}

	// While NATS is down, rows pile up: the backlog and its age show it.
	b.nats.Stop()
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.InsertRows(t, b.db, 300, "events.a")
	waitfor.Condition(t, 10*time.Second, "the backlog gauge", func() bool {
		return testutil.ToFloat64(m.Backlog.WithLabelValues("nats")) == 300
	})
	waitfor.Condition(t, 10*time.Second, "the oldest due age to grow", func() bool {
		return testutil.ToFloat64(m.OldestDueAge) > 0.1
	})
	if got := testutil.ToFloat64(m.SinkAvailable.WithLabelValues("nats")); got != 0 {
		t.Errorf("sink_available = %v while NATS is down", got)
	}
	b.nats.Restart()
	relaytest.WaitDrained(t, b.db, 30*time.Second)

	// A row no stream captures fails, waits in backoff, then is dead-lettered.
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('nowhere.x', 'x')`)
	waitfor.Condition(t, 10*time.Second, "the in_backoff gauge", func() bool { return testutil.ToFloat64(m.InBackoff) == 1 })
	waitfor.Condition(t, 10*time.Second, "the dead_letters gauge", func() bool { return testutil.ToFloat64(m.DeadLetters) == 1 })
	waitfor.Condition(t, 10*time.Second, "the backlog to clear", func() bool {
		return testutil.ToFloat64(m.Backlog.WithLabelValues("nats")) == 0 && testutil.ToFloat64(m.OldestDueAge) == 0
	})

	waitfor.Count(t, 10*time.Second, "dead_lettered", func() float64 {
		return testutil.ToFloat64(m.Messages.WithLabelValues("nats", "dead_lettered"))
	}, 1)
	counts := map[string]float64{
		"delivered":     testutil.ToFloat64(m.Messages.WithLabelValues("nats", "delivered")),
		"retried":       testutil.ToFloat64(m.Messages.WithLabelValues("nats", "retried")),
		"dead_lettered": testutil.ToFloat64(m.Messages.WithLabelValues("nats", "dead_lettered")),
	}
	if counts["delivered"] != 300 || counts["retried"] != 1 || counts["dead_lettered"] != 1 {
		t.Errorf("messages_total = %v, want 300 delivered, 1 retried, 1 dead-lettered", counts)
	}
	if got := testutil.ToFloat64(m.InFlight.WithLabelValues("nats")); got != 0 {
		t.Errorf("in_flight = %v after the drain, want 0", got)
	}
	if n := histogramCount(t, m.DeliveryLatency); n != 300 {
		t.Errorf("delivery_latency_seconds has %d observations, want one per delivered message (300)", n)
	}
	for name, h := range map[string]prometheus.Collector{
		"claim_duration_seconds": m.ClaimDuration, "claim_rows": m.ClaimRows,
		"settle_duration_seconds": m.SettleDuration, "deliver_duration_seconds": m.DeliverDuration,
	} {
		if histogramCount(t, h) == 0 {
			t.Errorf("%s has no observations", name)
		}
	}
	if got := testutil.ToFloat64(m.StatsErrors); got != 0 {
		t.Errorf("stats_errors_total = %v", got)
	}
	if v := testutil.ToFloat64(m.HotTableDeadTuples); v < 0 {
		t.Errorf("hot_table_dead_tuples = %v", v)
	}
}

func TestRelay_CloudEventsHeadersAndTraceContextPassThrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.CloudEventsSource = "/orders-service"
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, headers) VALUES
	  ('events.orders.created', '{"id":1}', 'evt-1', '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}'),
	  ('events.orders.paid', '{"id":2}', 'evt-2', '{"ce-type": "com.example.order.paid"}')`)
	relaytest.WaitDrained(t, b.db, 10*time.Second)
	msgs := b.nats.Messages(t, stream)
	if len(msgs) != 2 {
		t.Fatalf("stream holds %d messages, want 2", len(msgs))
	}
	byID := map[string]*nats.Msg{}
	for _, msg := range msgs {
		byID[msg.Header.Get(nats.MsgIdHdr)] = msg
	}
	first, second := byID["evt-1"], byID["evt-2"]
	want := map[string]string{
		"traceparent":    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"tracestate":     "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
		"ce-specversion": "1.0", "ce-id": "evt-1", "ce-type": "events.orders.created", "ce-source": "/orders-service",
	}
	for k, v := range want {
		if got := first.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if ts, err := time.Parse(time.RFC3339Nano, first.Header.Get("ce-time")); err != nil || time.Since(ts) > time.Minute {
		t.Errorf("ce-time = %q (%v), want the row's created_at in RFC 3339", first.Header.Get("ce-time"), err)
	}
	if got := second.Header.Get("ce-type"); got != "com.example.order.paid" {
		t.Errorf("a row's own ce-type was replaced by %q", got)
	}
	if strings.Contains(first.Header.Get("ce-id"), " ") {
		t.Error("ce-id has spaces")
	}
}

func TestRelay_NewRefusesAnInvalidConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, mutate := range map[string]func(*relay.Config){
		"no sinks":            func(c *relay.Config) { c.Sinks = nil },
		"unknown default":     func(c *relay.Config) { c.DefaultSink = "kafka" },
		"bad schema":          func(c *relay.Config) { c.Schema = "Bad;Drop" },
		"in flight < batch":   func(c *relay.Config) { c.BatchSize, c.MaxInFlight = 100, 10 },
		"backoff max < min":   func(c *relay.Config) { c.BackoffMin, c.BackoffMax = time.Second, time.Millisecond },
		"short lease":         func(c *relay.Config) { c.Lease = time.Second },
		"negative attempts":   func(c *relay.Config) { c.MaxAttempts = -1 },
		"negative drain time": func(c *relay.Config) { c.DrainTimeout = -time.Second },
	} {
		cfg := b.config(t)
		mutate(&cfg)
		if _, err := relay.New(b.db.Pool, cfg); err == nil {
			t.Errorf("%s: New accepted the config", name)
		}
	}
}

// TestMetrics_RelaysOfASchemaTakeTurnsCountingTheGauges: the backlog and
// table-health counts are the same for every relay of a schema, so the
// relays take turns making them (relay/internal/sharedcount). Two relays
// whose gauges refresh every 200 ms both show the backlog, and between them
// count at most once per nine tenths of an interval, where each alone
// would count every 200 ms; a relay that used the other's counts shows
// that they were older than its own would be.
func TestMetrics_RelaysOfASchemaTakeTurnsCountingTheGauges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.nats.Stop() // the rows stay due
	relaytest.InsertRows(t, b.db, 300, "events.a")
	const interval = 200 * time.Millisecond
	var ms []*relay.Metrics
	for _, id := range []string{"relay-1", "relay-2"} {
		cfg := b.config(t)
		cfg.ID = id
		cfg.StatsInterval = interval
		ms = append(ms, cfg.Metrics)
		relaytest.Start(t, b.db.Pool, cfg)
	}
	counted := func() float64 { return testutil.ToFloat64(ms[0].StatsCounted) + testutil.ToFloat64(ms[1].StatsCounted) }
	for i, m := range ms {
		waitfor.Condition(t, 10*time.Second, fmt.Sprintf("relay-%d's backlog gauge", i+1), func() bool {
			return testutil.ToFloat64(m.Backlog.WithLabelValues("nats")) == 300
		})
	}

	start, before := time.Now(), counted()
	var readAge float64
	waitfor.Condition(t, 10*time.Second, "a relay to show counts another relay made", func() bool {
		for _, m := range ms {
			readAge = max(readAge, testutil.ToFloat64(m.StatsAge))
		}
		return readAge > 0
	})
	time.Sleep(3 * time.Second)
	elapsed, n := time.Since(start), counted()-before
	// A count begins at least nine tenths of an interval after the one
	// before it (two more: the ones under way at either end).
	if limit := elapsed.Seconds()/(0.9*interval.Seconds()) + 2; n > limit {
		t.Errorf("two relays counted the gauges %v times in %s; taking turns, at most %.0f", n, elapsed.Round(time.Millisecond), limit)
	}
	for i, m := range ms {
		if got := testutil.ToFloat64(m.Backlog.WithLabelValues("nats")); got != 300 {
			t.Errorf("relay-%d's backlog gauge = %v, want 300", i+1, got)
		}
		if got := testutil.ToFloat64(m.StatsErrors); got != 0 {
			t.Errorf("relay-%d's stats_errors_total = %v", i+1, got)
		}
	}
}
