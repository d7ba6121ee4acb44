package pubsub_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/outbox-relay/outbox-relay/internal/testkit/pubsubtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	pubsubsink "github.com/outbox-relay/outbox-relay/sinks/pubsub"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

const prefix = "test."

// topic is the Pub/Sub topic ID the suite's messages go to.
const topic = prefix + sinktest.Topic

// harness makes the sinks the conformance and hostile-row suites run against.
var harness = sinktest.Harness{
	New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
		srv := pubsubtest.Start(t)
		srv.CreateTopic(t, topic)
		return newSink(t, srv, nil), &destination{srv: srv}
	},
	Reject: func(m *sinks.Message) { m.Topic = "sinktest/refused" },
	// Pub/Sub keeps both copies of a message published twice (its
	// message IDs differ); consumers drop the second by
	// outbox_idempotency_key.
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
type destination struct{ srv *pubsubtest.Server }

func (d *destination) Received(t testing.TB) []sinktest.Received {
	var out []sinktest.Received
	for _, m := range d.srv.Messages(topic) {
		out = append(out, received(m))
	}
	return out
}

func (d *destination) Break(testing.TB) { d.srv.Stop() }

func (d *destination) Purge(testing.TB) { d.srv.Purge() }

func received(m *pstest.Message) sinktest.Received {
	h := map[string][]string{}
	for k, v := range m.Attributes {
		h[k] = []string{v}
	}
	return sinktest.Received{
		Topic:          strings.TrimPrefix(strings.TrimPrefix(m.Topic, pubsubtest.TopicName("")), prefix),
		Payload:        m.Data,
		Headers:        h,
		IdempotencyKey: m.Attributes[pubsubsink.IdempotencyKeyAttribute],
	}
}

// newSink returns a sink publishing to srv under prefix, connected,
// closed at cleanup. configure, when set, changes its Config first.
func newSink(t testing.TB, srv *pubsubtest.Server, configure func(*pubsubsink.Config)) *pubsubsink.Sink {
	t.Helper()
	s := openSink(t, srv, configure)
	waitfor.Condition(t, 15*time.Second, "the sink to reach Pub/Sub", func() bool { return s.Available() == nil })
	return s
}

// openSink is newSink without the wait.
func openSink(t testing.TB, srv *pubsubtest.Server, configure func(*pubsubsink.Config)) *pubsubsink.Sink {
	t.Helper()
	cfg := pubsubsink.Config{
		Project:      pubsubtest.Project,
		EmulatorHost: srv.Addr(),
		TopicPrefix:  prefix,
		Timeout:      5 * time.Second,
		Logger:       testLogger(t),
	}
	if configure != nil {
		configure(&cfg)
	}
	s, err := pubsubsink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
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

// byKey returns the messages of topic ID id by idempotency key, waiting
// until every one of want is there.
func byKey(t *testing.T, srv *pubsubtest.Server, id string, want []sinks.Message) map[string][]*pstest.Message {
	t.Helper()
	var got map[string][]*pstest.Message
	waitfor.Condition(t, 15*time.Second, "the messages at the fake", func() bool {
		got = map[string][]*pstest.Message{}
		for _, m := range srv.Messages(id) {
			k := m.Attributes[pubsubsink.IdempotencyKeyAttribute]
			got[k] = append(got[k], m)
		}
		for _, m := range want {
			if len(got[m.IdempotencyKey]) == 0 {
				return false
			}
		}
		return true
	})
	return got
}

func TestSink_MessageCarriesTheRow(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	msgs := sinktest.Messages(t, 2)
	msgs[0].Key = "order-42"
	msgs[0].Headers = map[string]string{
		"traceparent":            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"outbox_idempotency_key": "forged",
		"Outbox_Topic":           "forged-too",
		"x-empty":                "",
	}
	msgs[1].Payload = nil
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := byKey(t, srv, topic, msgs)
	m := got[msgs[0].IdempotencyKey][0]
	if m.OrderingKey != "order-42" {
		t.Errorf("ordering key %q, want the row's key", m.OrderingKey)
	}
	want := map[string]string{
		"traceparent":            msgs[0].Headers["traceparent"],
		"x-empty":                "",
		"outbox_idempotency_key": msgs[0].IdempotencyKey,
		"outbox_topic":           sinktest.Topic,
	}
	if len(m.Attributes) != len(want) {
		t.Errorf("attributes %q, want %q: a row cannot set the relay's", m.Attributes, want)
	}
	for k, v := range want {
		if got, ok := m.Attributes[k]; !ok || got != v {
			t.Errorf("attribute %s = %q, want %q", k, got, v)
		}
	}
	if m := got[msgs[1].IdempotencyKey][0]; len(m.Data) != 0 || m.OrderingKey != "" {
		t.Errorf("a row without payload or key arrived with %d bytes and ordering key %q", len(m.Data), m.OrderingKey)
	}
}

func TestSink_OneTopic(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, "all-events")
	s := newSink(t, srv, func(c *pubsubsink.Config) { c.Topic = "all-events" })
	msgs := sinktest.Messages(t, 2)
	msgs[1].Topic = "billing.invoice.paid"
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := byKey(t, srv, "all-events", msgs)
	if tp := got[msgs[1].IdempotencyKey][0].Attributes[pubsubsink.TopicAttribute]; tp != "billing.invoice.paid" {
		t.Errorf("outbox_topic %q, want the row's topic", tp)
	}
}
