package kafka_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

const prefix = "test."

// topic is the Kafka topic the suite's messages go to.
const topic = prefix + sinktest.Topic

// harness makes the sinks the conformance and hostile-row suites run against.
var harness = sinktest.Harness{
	New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
		c := kafkatest.Start(t)
		c.CreateTopic(t, topic, 3)
		return newSink(t, c, nil), &destination{c: c}
	},
	Reject: func(m *sinks.Message) { m.Topic = "sinktest/refused" },
	// Kafka keeps both copies of a message sent twice: its idempotent
	// producer drops only the client's own resends.
	Features: sinktest.Features{Headers: true, DedupsByKey: false, Outage: true},
}

func TestSink_Conformance(t *testing.T) {
	sinktest.Run(t, harness)
}

func TestSink_HostileRows(t *testing.T) {
	t.Parallel()
	sinktest.RunHostile(t, harness)
}

func FuzzHostileRows(f *testing.F) {
	sinktest.FuzzHostile(f, harness)
}

// destination is the suite's topic as the suite sees it.
type destination struct{ c *kafkatest.Cluster }

func (d *destination) Received(t testing.TB) []sinktest.Received {
	var out []sinktest.Received
	for _, r := range d.c.Records(t, topic) {
		out = append(out, received(r))
	}
	return out
}

func (d *destination) Break(testing.TB) { d.c.Stop() }

func received(r *kgo.Record) sinktest.Received {
	h := map[string][]string{}
	for _, kv := range r.Headers {
		h[kv.Key] = append(h[kv.Key], string(kv.Value))
	}
	return sinktest.Received{
		Topic:          strings.TrimPrefix(r.Topic, prefix),
		Payload:        r.Value,
		Headers:        h,
		IdempotencyKey: header(r, kafkasink.IdempotencyKeyHeader),
	}
}

// header returns the value of r's header name, "" when it has none.
func header(r *kgo.Record, name string) string {
	for _, kv := range r.Headers {
		if kv.Key == name {
			return string(kv.Value)
		}
	}
	return ""
}

// newSink returns a sink producing to c under prefix, connected, closed at
// cleanup. configure, when set, changes its Config first.
func newSink(t testing.TB, c *kafkatest.Cluster, configure func(*kafkasink.Config)) *kafkasink.Sink {
	t.Helper()
	cfg := kafkasink.Config{
		Brokers:        c.Brokers(),
		TopicPrefix:    prefix,
		ProduceTimeout: 5 * time.Second,
		Logger:         testLogger(t),
	}
	if configure != nil {
		configure(&cfg)
	}
	s, err := kafkasink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	waitfor.Condition(t, 15*time.Second, "the sink to reach the cluster", func() bool { return s.Available() == nil })
	return s
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: testLogLevel()}))
}

// deliver delivers msgs within 20s and checks that there is one outcome per
// message.
func deliver(t *testing.T, s sinks.Sink, msgs []sinks.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := s.Deliver(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(errs), len(msgs))
	}
	return errs
}

func TestSink_RecordCarriesTheRow(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, 3)
	s := newSink(t, c, nil)
	msgs := sinktest.Messages(t, 3)
	msgs[0].Key = "order-42"
	msgs[0].Headers = map[string]string{
		"traceparent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"Idempotency-Key": "forged",
		"idempotency-key": "forged-too",
		"x-empty":         "",
	}
	msgs[1].Payload = nil // empty, not a tombstone
	msgs[2].Payload = []byte{0x00, 0xff, '\r', '\n'}
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := waitRecords(t, c, msgs)

	r := got[msgs[0].IdempotencyKey][0]
	if r.Topic != prefix+sinktest.Topic {
		t.Errorf("topic %q, want the prefix and the row's topic", r.Topic)
	}
	if string(r.Key) != "order-42" {
		t.Errorf("key %q, want the row's key", r.Key)
	}
	var ids []string
	for _, h := range r.Headers {
		if strings.EqualFold(h.Key, kafkasink.IdempotencyKeyHeader) {
			ids = append(ids, h.Key+"="+string(h.Value))
		}
	}
	if want := kafkasink.IdempotencyKeyHeader + "=" + msgs[0].IdempotencyKey; len(ids) != 1 || ids[0] != want {
		t.Errorf("idempotency headers %q, want only %q: a row cannot set it", ids, want)
	}
	if v := header(r, "traceparent"); v != msgs[0].Headers["traceparent"] {
		t.Errorf("traceparent %q, want the row's", v)
	}
	if v := header(r, "x-empty"); v != "" || !hasHeader(r, "x-empty") {
		t.Error("an empty row header was lost")
	}

	if r := got[msgs[1].IdempotencyKey][0]; r.Value == nil || len(r.Value) != 0 {
		t.Errorf("empty payload arrived as %#v, want an empty value (a null value is a tombstone)", r.Value)
	}
	if r := got[msgs[1].IdempotencyKey][0]; r.Key != nil {
		t.Errorf("a row without a key gave the record key %q, want none", r.Key)
	}
}

func hasHeader(r *kgo.Record, name string) bool {
	for _, h := range r.Headers {
		if h.Key == name {
			return true
		}
	}
	return false
}

// testLogLevel is debug with TEST_LOG set (the client's log too), else
// info.
func testLogLevel() slog.Level {
	if os.Getenv("TEST_LOG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
