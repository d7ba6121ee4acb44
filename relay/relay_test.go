package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

const stream = "EVENTS"

// bundle is what most relay tests need: a fresh schema, a NATS server with a
// stream capturing events.>, and a NATS sink.
type bundle struct {
	db   *dbtest.Schema
	nats *natstest.Server
	sink *natssink.Sink
}

func setup(t testing.TB, configure ...func(*server.Options)) *bundle {
	t.Helper()
	b := &bundle{db: dbtest.New(t), nats: natstest.Start(t, configure...)}
	b.nats.CreateStream(t, stream, "events.>")
	b.sink = newSink(t, b.nats.URL())
	return b
}

func newSink(t testing.TB, url string) *natssink.Sink {
	t.Helper()
	s, err := natssink.New(natssink.Config{URL: url, JetStream: true, AckTimeout: 5 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// config returns a relay config for the bundle with test-friendly timings.
func (b *bundle) config(t testing.TB) relay.Config {
	return relay.Config{
		Schema:       b.db.Name,
		Sinks:        map[string]sinks.Sink{"nats": b.sink},
		PollInterval: 10 * time.Millisecond,
		Lease:        10 * time.Second,
		BackoffMin:   100 * time.Millisecond,
		BackoffMax:   time.Second,
		DrainTimeout: 2 * time.Second,
		Logger:       testLogger(t),
		Metrics:      relay.NewMetrics(),
	}
}

// testLogger returns the relay tests' logger: warnings and errors in the
// test's output, everything with TEST_LOG set.
func testLogger(t testing.TB) *slog.Logger {
	log, _ := testlog.New(t, slog.LevelWarn)
	return log
}

func TestRelay_DeliversPlainSQLRowsOnceByteForByte(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 3000
	relaytest.InsertRows(t, b.db, n, "events.orders.created")
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)

	relaytest.WaitDrained(t, b.db, relaytest.Budget(n))
	waitfor.Condition(t, 10*time.Second, "all messages in the stream", func() bool { return b.nats.Count(t, stream) >= n })
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, n)
	// The rows' keys were generated at insert: none can come again, so
	// none is recorded (TestRelay_OnlyKeysTheProducerChoseAreRecorded).
	if got := b.db.Count(t, "delivered_keys"); got != 0 {
		t.Errorf("delivered_keys holds %d keys, want none of the generated ones", got)
	}
	waitfor.Count(t, 10*time.Second, "outbox_relay_messages_total{outcome=delivered}", func() float64 {
		return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("nats", "delivered"))
	}, n)
}

func TestRelay_TwoRelaysShareATableWithoutDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Count raw publishes, not just what the stream kept: the stream would
	// hide a double send inside its duplicate window.
	raw := b.nats.Connect(t)
	var mu sync.Mutex
	published := map[string]int{}
	sub, err := raw.Subscribe("events.>", func(m *nats.Msg) {
		mu.Lock()
		published[m.Header.Get(nats.MsgIdHdr)]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}

	const n = 4000
	relaytest.InsertRows(t, b.db, n, "events.orders.created")
	cfgA, cfgB := b.config(t), b.config(t)
	cfgA.ID, cfgB.ID = "relay-a", "relay-b"
	cfgA.BatchSize, cfgB.BatchSize = 200, 200
	cfgB.Sinks = map[string]sinks.Sink{"nats": newSink(t, b.nats.URL())}
	relaytest.Start(t, b.db.Pool, cfgA)
	relaytest.Start(t, b.db.Pool, cfgB)

	relaytest.WaitDrained(t, b.db, relaytest.Budget(n))
	waitfor.Condition(t, 10*time.Second, "every publish to reach the subscriber", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(published) >= n
	})
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, n)
	delivered := func(m *relay.Metrics) float64 {
		return testutil.ToFloat64(m.Messages.WithLabelValues("nats", "delivered"))
	}
	waitfor.Count(t, 10*time.Second, "deliveries by both relays", func() float64 {
		return delivered(cfgA.Metrics) + delivered(cfgB.Metrics)
	}, n)
	a, c := delivered(cfgA.Metrics), delivered(cfgB.Metrics)
	if a == 0 || c == 0 {
		t.Errorf("relays delivered %v and %v messages; want both to work and %d in all", a, c, n)
	}
	// SKIP LOCKED gives each claim different rows: a message is published
	// twice only when a publish failed and was retried (an ack timeout on a
	// loaded machine), never because both relays claimed it.
	retried := testutil.ToFloat64(cfgA.Metrics.Messages.WithLabelValues("nats", "retried")) +
		testutil.ToFloat64(cfgB.Metrics.Messages.WithLabelValues("nats", "retried"))
	mu.Lock()
	extra := 0
	for _, c := range published {
		extra += c - 1
	}
	mu.Unlock()
	if float64(extra) > retried {
		t.Errorf("%d messages were published more than once but only %v deliveries were retried: two relays claimed the same rows", extra, retried)
	}
}

// everyMode runs test once per delivery mode, in parallel subtests, with
// the function that sets the mode on a config.
func everyMode(t *testing.T, test func(t *testing.T, set func(*relay.Config))) {
	modes := map[outbox.Mode]func(*relay.Config){outbox.ModeUnordered: func(*relay.Config) {}}
	maps.Copy(modes, keyOrderModes)
	for mode, set := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			test(t, set)
		})
	}
}

func TestRelay_NATSOutageLosesNothing(t *testing.T) {
	t.Parallel()
	everyMode(t, testNATSOutageLosesNothing)
}

func testNATSOutageLosesNothing(t *testing.T, set func(*relay.Config)) {
	b := setup(t)
	const n = 5000
	cfg := b.config(t)
	set(&cfg)
	cfg.BatchSize = 100
	relaytest.Start(t, b.db.Pool, cfg)

	relaytest.InsertRows(t, b.db, n/2, "events.orders.created")
	waitfor.Condition(t, 30*time.Second, "some deliveries", func() bool { return b.db.Count(t, "archive") > 0 })
	b.nats.Stop()
	relaytest.InsertRows(t, b.db, n/2, "events.orders.created")
	waitfor.Condition(t, 10*time.Second, "the relay to see the sink as unavailable", func() bool {
		return testutil.ToFloat64(cfg.Metrics.SinkAvailable.WithLabelValues("nats")) == 0
	})
	if left := b.db.Count(t, "messages_all"); left == 0 {
		t.Fatal("every row was settled while NATS was down")
	}
	b.nats.Restart()

	relaytest.WaitDrained(t, b.db, relaytest.Budget(n))
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, n)
	if got := b.db.Count(t, "dead_letters"); got != 0 {
		t.Errorf("%d rows were dead-lettered", got)
	}
}

func TestRelay_TerminatedBackendsReconnectAndLoseNothing(t *testing.T) {
	t.Parallel()
	everyMode(t, testTerminatedBackendsReconnectAndLoseNothing)
}

func testTerminatedBackendsReconnectAndLoseNothing(t *testing.T, set func(*relay.Config)) {
	b := setup(t)
	const n = 6000
	cfg := b.config(t)
	set(&cfg)
	cfg.BatchSize = 100
	cfg.Lease = 3 * time.Second
	relayApp := "relay-" + b.db.Name
	relaytest.Start(t, b.db.NewPool(t, relayApp), cfg)
	relaytest.InsertRows(t, b.db, n, "events.orders.created")

	admin := b.db.Conn(t)
	terminated := 0
	for round := 0; round < 5 && b.db.Count(t, "messages_all") > 0; round++ {
		var k int
		err := admin.QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`,
			relayApp).Scan(&k)
		if err != nil {
			t.Fatal(err)
		}
		terminated += k
		time.Sleep(100 * time.Millisecond)
	}
	if terminated == 0 {
		t.Fatal("no relay backend was terminated; the test proves nothing")
	}
	relaytest.WaitDrained(t, b.db, 60*time.Second)
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, n)
}

func TestRelay_PoisonMessageIsDeadLetteredWhileTheRestFlow(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *server.Options) { o.MaxPayload = 64 * 1024 })
	relaytest.InsertRows(t, b.db, 100, "events.orders.created")
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.big', convert_to(repeat('x', 100000), 'UTF8'), 'too-big')`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.*', 'x', 'wildcard')`)
	relaytest.InsertRows(t, b.db, 100, "events.orders.created")
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)

	relaytest.WaitDrained(t, b.db, 30*time.Second)
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, 200)
	rows, err := b.db.Pool.Query(context.Background(), "SELECT idempotency_key, reason, error, attempts FROM "+b.db.Table("dead_letters")+" ORDER BY idempotency_key")
	if err != nil {
		t.Fatal(err)
	}
	type dead struct {
		key, reason, err string
		attempts         int
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dead, error) {
		var d dead
		return d, r.Scan(&d.key, &d.reason, &d.err, &d.attempts)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("dead letters = %+v, want the two poison messages", got)
	}
	for _, d := range got {
		if d.reason != outbox.ReasonPermanent || d.attempts != 1 {
			t.Errorf("dead letter %s: reason %q after %d attempts, want %q after 1", d.key, d.reason, d.attempts, outbox.ReasonPermanent)
		}
	}
	if !bytes.Contains([]byte(got[0].err), []byte("max_payload")) {
		t.Errorf("too-big dead letter error = %q, want it to mention max_payload", got[0].err)
	}
	if !bytes.Contains([]byte(got[1].err), []byte("wildcard")) {
		t.Errorf("wildcard dead letter error = %q, want it to mention wildcards", got[1].err)
	}
	waitfor.Count(t, 10*time.Second, "outbox_relay_messages_total{outcome=dead_lettered}", func() float64 {
		return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("nats", "dead_lettered"))
	}, 2)
}

func TestRelay_DeliveredKeyIsArchivedAsDuplicateWithoutSending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.a', 'first', 'key-1')`)
	relaytest.WaitDrained(t, b.db, 10*time.Second)
	// The producer sends the same logical event again after delivery.
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.a', 'again', 'key-1')`)
	relaytest.WaitDrained(t, b.db, 10*time.Second)

	if got := b.nats.Count(t, stream); got != 1 {
		t.Errorf("stream holds %d messages, want 1", got)
	}
	var dups int
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+b.db.Table("archive")+" WHERE duplicate").Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups != 1 {
		t.Errorf("archive holds %d duplicates, want 1", dups)
	}
	waitfor.Count(t, 10*time.Second, "outbox_relay_messages_total{outcome=deduplicated}", func() float64 {
		return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("nats", "deduplicated"))
	}, 1)
}

// A key the insert generated cannot have been delivered before: the relay
// neither looks it up nor records it (the cost of deduplication is paid
// only for keys a producer chose), and a key a producer chose is recorded,
// whatever the producer wrote into the relay's dedup column.
func TestRelay_OnlyKeysTheProducerChoseAreRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('events.a', 'generated')`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, dedup) VALUES ('events.a', 'chosen', 'order-7', false)`)
	relaytest.WaitDrained(t, b.db, 10*time.Second)

	msgs := b.nats.Messages(t, stream)
	if len(msgs) != 2 {
		t.Fatalf("stream holds %d messages, want 2", len(msgs))
	}
	var generated string
	for _, m := range msgs {
		if string(m.Data) == "generated" {
			generated = m.Header.Get("Nats-Msg-Id")
		}
	}
	if len(generated) != 36 {
		t.Errorf("generated idempotency key %q, want a UUID", generated)
	}
	var recorded []string
	rows, err := b.db.Pool.Query(context.Background(), "SELECT idempotency_key FROM "+b.db.Table("delivered_keys")+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, k)
	}
	if len(recorded) != 1 || recorded[0] != "order-7" {
		t.Errorf("delivered keys %q, want only the chosen key order-7", recorded)
	}
	// The chosen key still deduplicates.
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.a', 'chosen again', 'order-7')`)
	relaytest.WaitDrained(t, b.db, 10*time.Second)
	if got := b.nats.Count(t, stream); got != 2 {
		t.Errorf("stream holds %d messages after the chosen key came again, want 2", got)
	}
}

func TestRelay_TransientFailuresRetryWithBackoffThenDeliver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)
	// No stream captures other.>: JetStream has no responder, a transient
	// failure (an operator may still create the stream).
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('other.thing', 'later')`)
	waitfor.Condition(t, 20*time.Second, "a retry", func() bool {
		return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("nats", "retried")) >= 1
	})
	var attempts int
	var lastError string
	var availableAt time.Time
	err := b.db.Pool.QueryRow(context.Background(), "SELECT attempts, last_error, available_at FROM "+b.db.Table("messages")).Scan(&attempts, &lastError, &availableAt)
	if err != nil {
		t.Fatal(err)
	}
	if attempts < 1 || lastError == "" {
		t.Errorf("after a failed delivery: attempts %d, last_error %q", attempts, lastError)
	}
	b.nats.CreateStream(t, "OTHER", "other.>")
	relaytest.WaitDrained(t, b.db, 20*time.Second)
	if got := b.nats.Count(t, "OTHER"); got != 1 {
		t.Errorf("OTHER holds %d messages, want 1", got)
	}
}

func TestRelay_ExhaustedAttemptsGoToDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.MaxAttempts = 3
	cfg.BackoffMin, cfg.BackoffMax = 10*time.Millisecond, 10*time.Millisecond
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('nowhere.at.all', 'x', 'doomed')`)
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	var reason, errText string
	var attempts int
	err := b.db.Pool.QueryRow(context.Background(), "SELECT reason, error, attempts FROM "+b.db.Table("dead_letters")+" WHERE idempotency_key = 'doomed'").Scan(&reason, &errText, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	if reason != outbox.ReasonExhausted || attempts != 3 || errText == "" {
		t.Errorf("dead letter: reason %q, attempts %d, error %q; want %q after 3 attempts with the error", reason, attempts, errText, outbox.ReasonExhausted)
	}
}

// A dead letter keeps its first delivery error besides its last: what
// went wrong first is often the cause, what went wrong last a symptom.
func TestRelay_DeadLettersKeepTheFirstErrorAndTheLast(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.MaxAttempts = 3
	cfg.BackoffMin, cfg.BackoffMax = 10*time.Millisecond, 10*time.Millisecond
	var calls atomic.Int32
	cfg.Sinks = map[string]sinks.Sink{"nats": &sinktest.Func{DeliverFunc: func(_ context.Context, msgs []sinks.Message) []error {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = fmt.Errorf("attempt %d failed", calls.Add(1))
		}
		return errs
	}}}
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.a', 'x', 'doomed')`)
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	var first, last string
	err := b.db.Pool.QueryRow(context.Background(), "SELECT first_error, error FROM "+b.db.Table("dead_letters")+" WHERE idempotency_key = 'doomed'").Scan(&first, &last)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first, "attempt 1 failed") || !strings.Contains(last, "attempt 3 failed") {
		t.Errorf("dead letter: first error %q, last %q; want attempt 1's and attempt 3's", first, last)
	}
}

func TestRelay_UnknownDestinationIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, destination) VALUES ('events.a', 'x', 'kafka')`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, destination) VALUES ('events.b', 'y', 'nats')`)
	relaytest.WaitDrained(t, b.db, 10*time.Second)
	var reason, errText string
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT reason, error FROM "+b.db.Table("dead_letters")).Scan(&reason, &errText); err != nil {
		t.Fatal(err)
	}
	if reason != outbox.ReasonNoSink || !bytes.Contains([]byte(errText), []byte(`"kafka"`)) {
		t.Errorf("dead letter reason %q, error %q; want %q naming kafka", reason, errText, outbox.ReasonNoSink)
	}
	if got := b.nats.Count(t, stream); got != 1 {
		t.Errorf("stream holds %d messages, want 1", got)
	}
	waitfor.Count(t, 10*time.Second, `messages_total{sink="(unknown)",outcome="dead_lettered"}`, func() float64 {
		return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("(unknown)", "dead_lettered"))
	}, 1)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cfg.Metrics.Messages)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "sink" && l.GetValue() != "nats" && l.GetValue() != "(unknown)" {
					t.Errorf("messages_total has a series for sink %q: row data must not make series", l.GetValue())
				}
			}
		}
	}
}

func TestRelay_ARowThatOutlivesEveryLeaseIsDeadLetteredUnsent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The row's leases expired three times without an outcome: a relay
	// that crashes on this message each time it claims it.
	b.db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, attempts, claim_seq, leased_by, leased_until)
	              VALUES ('events.a', 'x', 'crasher', 3, 3, 'dead-relay', now() - interval '1 second')`)
	cfg := b.config(t)
	cfg.MaxAttempts = 3
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.WaitDrained(t, b.db, 10*time.Second)
	var reason, errText string
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT reason, error FROM "+b.db.Table("dead_letters")).Scan(&reason, &errText); err != nil {
		t.Fatal(err)
	}
	if reason != outbox.ReasonExhausted || !bytes.Contains([]byte(errText), []byte("without a delivery outcome")) {
		t.Errorf("dead letter %q: %q", reason, errText)
	}
	if got := b.nats.Count(t, stream); got != 0 {
		t.Errorf("the message was sent %d times, want 0", got)
	}
}

func TestRelay_ShutdownReleasesUnfinishedDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	started := make(chan struct{}, 1)
	sink := &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done() // holds every delivery until its context ends
		return sinks.Fill(make([]error, len(msgs)), ctx.Err())
	}}
	cfg.Sinks = map[string]sinks.Sink{"nats": sink}
	cfg.DrainTimeout = 200 * time.Millisecond
	_, stop := relaytest.Start(t, b.db.Pool, cfg)
	relaytest.InsertRows(t, b.db, 50, "events.a")
	<-started
	began := time.Now()
	stop()
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("shutdown took %s with a drain timeout of 200ms", took)
	}
	var leased, attempts int
	err := b.db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FILTER (WHERE leased_by IS NOT NULL OR available_at > now()), coalesce(sum(attempts), 0) FROM "+b.db.Table("messages")).Scan(&leased, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.db.Count(t, "messages_all"); got != 50 {
		t.Fatalf("hot table holds %d rows, want all 50", got)
	}
	if leased != 0 || attempts != 0 {
		t.Errorf("after shutdown: %d rows still leased or delayed, %d attempts counted; want 0 and 0", leased, attempts)
	}
}

func TestRelay_GuardedSettleCannotArchiveARowTakenOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Relay A's sink stalls past A's lease; relay B takes the row over and
	// delivers it; A's late success must not archive B's claim.
	release := make(chan struct{})
	var calls atomic.Int32
	slow := &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
		calls.Add(1)
		<-release // stalls past the lease
		return b.sink.Deliver(context.WithoutCancel(ctx), msgs)
	}}
	cfgA := b.config(t)
	cfgA.ID = "relay-a"
	cfgA.Lease = 2 * time.Second
	cfgA.Sinks = map[string]sinks.Sink{"nats": slow}
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.a', 'x', 'contested')`)
	relaytest.Start(t, b.db.Pool, cfgA)
	waitfor.Condition(t, 10*time.Second, "relay A to claim the row", func() bool { return calls.Load() > 0 })
	// Let A's lease expire, then take the row over as relay B would.
	b.db.Exec(t, `UPDATE %s.messages SET leased_until = now() WHERE idempotency_key = 'contested'`)
	var tookOver int
	err := b.db.Pool.QueryRow(context.Background(),
		"UPDATE "+b.db.Table("messages")+" SET leased_by = 'relay-b', attempts = attempts + 1, claim_seq = claim_seq + 1, leased_until = now() + interval '1 hour' WHERE idempotency_key = 'contested' RETURNING attempts").Scan(&tookOver)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	waitfor.Condition(t, 10*time.Second, "relay A to settle", func() bool {
		return testutil.ToFloat64(cfgA.Metrics.LeaseLost) >= 1
	})
	var leasedBy string
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT leased_by FROM "+b.db.Table("messages")+" WHERE idempotency_key = 'contested'").Scan(&leasedBy); err != nil {
		t.Fatalf("the row taken over by relay B is gone from the hot table: %v", err)
	}
	if leasedBy != "relay-b" || b.db.Count(t, "archive") != 0 {
		t.Errorf("row leased by %q, archive holds %d; want relay-b's lease intact and nothing archived", leasedBy, b.db.Count(t, "archive"))
	}
	if got := testutil.ToFloat64(cfgA.Metrics.Messages.WithLabelValues("nats", "delivered")); got != 0 {
		t.Errorf("relay A counted %v deliveries for an outcome it could not write down, want 0", got)
	}
}

func TestRelay_ExpiredLeaseIsRescued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A relay that died holding a lease: the row is leased, due again at
	// the lease's end.
	b.db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, attempts, leased_by, leased_until, available_at)
	              VALUES ('events.a', 'x', 'orphan', 1, 'dead-relay', now() + interval '300 milliseconds', now())`)
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.WaitDrained(t, b.db, 10*time.Second)
	if got := testutil.ToFloat64(cfg.Metrics.LeaseRescues); got != 1 {
		t.Errorf("lease rescues = %v, want 1", got)
	}
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, 1)
}

func TestRelay_DelayedMessageWaitsForAvailableAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, available_at) VALUES ('events.later', 'x', now() + interval '1 second')`)
	relaytest.WaitDrained(t, b.db, 10*time.Second)
	var early bool
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT delivered_at < created_at + interval '1 second' FROM "+b.db.Table("archive")).Scan(&early); err != nil {
		t.Fatal(err)
	}
	if early {
		t.Error("a message delayed by 1s was delivered before its available_at")
	}
}

func TestRelay_StoppedWhileRegisteringReturnsNil(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := relay.New(b.db.Pool, b.config(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run stopped before registering returned %v, want nil (a SIGTERM at start-up is a clean exit)", err)
	}
}
