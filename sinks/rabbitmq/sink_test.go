package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/rabbitmq"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// queue is the queue the tests bind to amq.topic.
const queue = "events"

// harness makes the sinks the conformance and hostile-row suites run against.
var harness = sinktest.Harness{
	New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
		v := rabbitmqtest.New(t)
		v.BindQueue(t, queue, rabbitmq.ExchangeDefault, sinktest.Topic, nil)
		return newSink(t, v, nil), &queueDestination{v: v, queue: queue}
	},
	// No broker takes a routing key over 255 bytes.
	Reject:   func(m *sinks.Message) { m.Topic = strings.Repeat("r", 256) },
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

// queueDestination is a queue as the suite sees it; Break deletes the
// virtual host.
type queueDestination struct {
	v     *rabbitmqtest.VHost
	queue string
	mu    sync.Mutex
	got   []sinktest.Received
}

func (d *queueDestination) Received(t testing.TB) []sinktest.Received {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.v.Take(t, d.queue) {
		d.got = append(d.got, received(m))
	}
	return slices.Clone(d.got)
}

func (d *queueDestination) Break(t testing.TB) { d.v.Delete(t) }

func (d *queueDestination) Purge(t testing.TB) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.v.Purge(t, d.queue)
	d.got = nil
}

// received is a delivery as the suite sees it: content_type is the row's
// content-type header.
func received(d amqp.Delivery) sinktest.Received {
	h := map[string][]string{}
	for k, v := range d.Headers {
		h[k] = []string{fmt.Sprint(v)}
	}
	if d.ContentType != "" {
		h["content-type"] = []string{d.ContentType}
	}
	return sinktest.Received{Topic: d.RoutingKey, Payload: d.Body, Headers: h, IdempotencyKey: d.MessageId}
}

// newSink returns a sink on v, with the changes configure makes to its
// config, connected, closed at cleanup.
func newSink(t testing.TB, v *rabbitmqtest.VHost, configure func(*rabbitmq.Config)) *rabbitmq.Sink {
	t.Helper()
	s, _ := newSinkLogged(t, v, configure)
	waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })
	return s
}

// newSinkLogged is newSink with the sink's log, without waiting for it to
// connect.
func newSinkLogged(t testing.TB, v *rabbitmqtest.VHost, configure func(*rabbitmq.Config)) (*rabbitmq.Sink, *testlog.Buffer) {
	t.Helper()
	log, logs := testlog.New(t, slog.LevelDebug)
	cfg := rabbitmq.Config{
		URL:            v.URL,
		ConfirmTimeout: 5 * time.Second,
		Logger:         log,
	}
	if configure != nil {
		configure(&cfg)
	}
	s, err := rabbitmq.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, logs
}

// slogTo returns a debug-level text logger writing to w.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func deliver(t testing.TB, s sinks.Sink, msgs []sinks.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := s.Deliver(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(errs), len(msgs))
	}
	return errs
}

func mustDeliver(t testing.TB, s sinks.Sink, msgs []sinks.Message) {
	t.Helper()
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

func TestSink_PropertiesAndHeaders(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, "orders.#", nil)
	s := newSink(t, v, nil)
	msgs := sinktest.Messages(t, 2)
	created := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	for i := range msgs {
		msgs[i].Topic = "orders.created"
		msgs[i].CreatedAt = created
		msgs[i].Payload = append([]byte{0x00, 0xff, '\r', '\n'}, msgs[i].Payload...)
	}
	msgs[0].Headers = map[string]string{
		"Content-Type": "application/cloudevents+json; charset=utf-8",
		"traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"x-tenant":     "acme",
		// Headers that steer the broker: dropped.
		"CC": "other.queue", "bcc": "secret.queue", "X-Death": "forged", "x-delay": "60000", "x-received-from": "forged",
	}
	mustDeliver(t, s, msgs)

	got := v.WaitTake(t, queue, 2, 15*time.Second)
	if len(got) != 2 {
		t.Fatalf("queue holds %d messages, want 2", len(got))
	}
	for i, d := range got {
		m := msgs[i]
		if !bytes.Equal(d.Body, m.Payload) {
			t.Errorf("message %d: body %q, want %q", i, d.Body, m.Payload)
		}
		if d.MessageId != m.IdempotencyKey {
			t.Errorf("message %d: message_id %q, want the idempotency key %q", i, d.MessageId, m.IdempotencyKey)
		}
		if d.DeliveryMode != amqp.Persistent {
			t.Errorf("message %d: delivery_mode %d, want 2 (persistent)", i, d.DeliveryMode)
		}
		if d.RoutingKey != m.Topic || d.Exchange != rabbitmq.ExchangeDefault || d.Type != m.Topic {
			t.Errorf("message %d: exchange %q, routing key %q, type %q; want amq.topic and the topic %q", i, d.Exchange, d.RoutingKey, d.Type, m.Topic)
		}
		if !d.Timestamp.Equal(created) {
			t.Errorf("message %d: timestamp %s, want created_at %s", i, d.Timestamp, created)
		}
	}
	first := got[0]
	if first.ContentType != "application/cloudevents+json; charset=utf-8" {
		t.Errorf("content_type %q, want the row's Content-Type header", first.ContentType)
	}
	want := amqp.Table{"traceparent": msgs[0].Headers["traceparent"], "x-tenant": "acme"}
	if fmt.Sprint(first.Headers) != fmt.Sprint(want) {
		t.Errorf("headers %v, want %v (content-type is a property; CC, BCC, x-death, x-delay and x-received-from are dropped)", first.Headers, want)
	}
	if got[1].ContentType != "" || len(got[1].Headers) != 0 {
		t.Errorf("a row without headers arrived with content_type %q and headers %v", got[1].ContentType, got[1].Headers)
	}
}

func TestSink_UnroutableIsRetriedUntilAQueueIsBound(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	s := newSink(t, v, nil)
	msgs := sinktest.Messages(t, 5)
	msgs[2].Topic = "payments.failed"

	for i, err := range deliver(t, s, msgs) {
		var unroutable *rabbitmq.UnroutableError
		switch {
		case !errors.As(err, &unroutable):
			t.Errorf("message %d without a bound queue: %v, want an *UnroutableError", i, err)
		case sinks.IsPermanent(err) || errors.Is(err, sinks.ErrNotAttempted):
			t.Errorf("message %d: %v, want a transient error", i, err)
		case !strings.Contains(err.Error(), `routing key "`+msgs[i].Topic+`"`) || !strings.Contains(err.Error(), `exchange "amq.topic"`):
			t.Errorf("message %d: %q does not name the exchange and the routing key %q", i, err, msgs[i].Topic)
		}
	}

	// A queue for one of the topics: its messages go through, the other
	// is still returned.
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, sinktest.Topic, nil)
	errs := deliver(t, s, msgs)
	for i, err := range errs {
		if i == 2 {
			if !strings.Contains(fmt.Sprint(err), "no queue is bound") {
				t.Errorf("payments.failed, still unbound: %v", err)
			}
		} else if err != nil {
			t.Errorf("message %d after binding a queue: %v", i, err)
		}
	}
	if got := v.WaitTake(t, queue, 4, 15*time.Second); len(got) != 4 {
		t.Errorf("queue holds %d messages, want 4: a returned message must never reach it", len(got))
	}
}

func TestSink_NackIsTransient(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	// A queue that takes two messages and refuses the rest.
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, sinktest.Topic, amqp.Table{"x-max-length": 2, "x-overflow": "reject-publish"})
	s := newSink(t, v, nil)
	msgs := sinktest.Messages(t, 5)
	errs := deliver(t, s, msgs)
	for i, err := range errs {
		switch {
		case i < 2 && err != nil:
			t.Errorf("message %d, with room in the queue: %v", i, err)
		case i >= 2 && !errors.Is(err, rabbitmq.ErrNacked):
			t.Errorf("message %d, queue full: %v, want ErrNacked", i, err)
		case i >= 2 && (sinks.IsPermanent(err) || errors.Is(err, sinks.ErrNotAttempted)):
			t.Errorf("message %d: %v, want a transient error", i, err)
		}
	}
	if n := v.Count(t, queue); n != 2 {
		t.Errorf("queue holds %d messages, want 2", n)
	}
	// Room again: the retries go through.
	v.Purge(t, queue)
	mustDeliver(t, s, msgs[2:4])
}

func TestSink_InvalidMessagesArePermanentAndNotSent(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, "#", nil)
	s := newSink(t, v, nil)
	msgs := sinktest.Messages(t, 6)
	msgs[1].Topic = strings.Repeat("k", 256)
	msgs[2].IdempotencyKey = strings.Repeat("i", 256)
	msgs[3].Headers = map[string]string{strings.Repeat("h", 256): "v"}
	msgs[4].Headers = map[string]string{"content-type": strings.Repeat("c", 256)}
	msgs[5].Topic = strings.Repeat("k", 255) // the longest routing key: fine
	errs := deliver(t, s, msgs)
	for i, err := range errs {
		bad := i >= 1 && i <= 4
		if bad && !sinks.IsPermanent(err) {
			t.Errorf("message %d: %v, want a permanent error", i, err)
		}
		if !bad && err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if got := v.WaitTake(t, queue, 2, 15*time.Second); len(got) != 2 {
		t.Errorf("queue holds %d messages, want the 2 valid ones", len(got))
	}
	// The channel survived: nothing was sent that the broker would refuse.
	mustDeliver(t, s, sinktest.Messages(t, 1))
}

func TestSink_PayloadOverMaxMessageSizeIsPermanent(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, sinktest.Topic, nil)
	// A limit of the sink's own above the broker's, so that the broker's
	// refusal is what stops the message.
	s, logs := newSinkLogged(t, v, func(c *rabbitmq.Config) {
		c.ConfirmTimeout = 20 * time.Second
		c.MaxMessageBytes = rabbitmq.MaxMessageBytesMax
	})
	waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })
	// RabbitMQ's default max_message_size is 128 MiB: the broker closes the
	// channel (406 PRECONDITION_FAILED) when a larger message arrives.
	const limit = 128 << 20
	msgs := sinktest.Messages(t, 3)
	msgs[1].Payload = make([]byte, limit+1)
	errs := deliver(t, s, msgs)
	var tooLarge *rabbitmq.TooLargeError
	if !sinks.IsPermanent(errs[1]) || !errors.As(errs[1], &tooLarge) || tooLarge.Max != limit || tooLarge.Size != limit+1 {
		t.Fatalf("payload of 128 MiB + 1: %v, want a permanent *TooLargeError with the broker's limit", errs[1])
	}
	for _, i := range []int{0, 2} {
		// The broker may close the channel before confirming the message
		// before it; the one after it is discarded.
		if errs[i] != nil && sinks.IsPermanent(errs[i]) {
			t.Errorf("message %d, of normal size: %v, want delivered or a transient error", i, errs[i])
		}
	}
	if len(logs.Lines("max_message_size")) == 0 {
		t.Error("the refusal was not logged")
	}

	// The sink reopens a channel, and now knows the limit: a message over
	// it is refused before publishing, and the others of its batch go
	// through.
	waitfor.Condition(t, 15*time.Second, "the channel to be reopened", func() bool { return s.Available() == nil })
	more := sinktest.Messages(t, 3)
	more[0].Payload = make([]byte, limit+10)
	errs = deliver(t, s, more)
	if !errors.As(errs[0], &tooLarge) || !sinks.IsPermanent(errs[0]) {
		t.Errorf("second payload over the limit: %v, want a permanent *TooLargeError", errs[0])
	}
	if errs[1] != nil || errs[2] != nil {
		t.Errorf("messages beside it: %v, %v", errs[1], errs[2])
	}
	if len(logs.Lines("RabbitMQ closed the channel")) != 1 {
		t.Errorf("the channel was closed %d times, want once: the second large payload must not be sent", len(logs.Lines("RabbitMQ closed the channel")))
	}
}

func TestSink_ExchangeIsConfigurable(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	v.DeclareExchange(t, "outbox.events", amqp.ExchangeDirect)
	v.BindQueue(t, queue, "outbox.events", sinktest.Topic, nil)
	s := newSink(t, v, func(c *rabbitmq.Config) { c.Exchange = "outbox.events" })
	msgs := sinktest.Messages(t, 3)
	mustDeliver(t, s, msgs)
	got := v.WaitTake(t, queue, 3, 15*time.Second)
	for i, d := range got {
		if d.Exchange != "outbox.events" || d.MessageId != msgs[i].IdempotencyKey {
			t.Errorf("message %d: exchange %q, message_id %q", i, d.Exchange, d.MessageId)
		}
	}
}

func TestSink_MissingExchangeIsRetried(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	s := newSink(t, v, func(c *rabbitmq.Config) { c.Exchange = "not.declared" })
	for i, err := range deliver(t, s, sinktest.Messages(t, 3)) {
		if err == nil || sinks.IsPermanent(err) {
			t.Errorf("message %d to a missing exchange: %v, want a transient error", i, err)
		}
		if err != nil && !strings.Contains(err.Error(), "no exchange 'not.declared'") {
			t.Errorf("message %d: %v does not say the exchange is missing", i, err)
		}
	}
	// Once the exchange and a queue exist, the retries go through.
	v.DeclareExchange(t, "not.declared", amqp.ExchangeTopic)
	v.BindQueue(t, queue, "not.declared", "#", nil)
	waitfor.Condition(t, 15*time.Second, "the channel to be reopened", func() bool { return s.Available() == nil })
	mustDeliver(t, s, sinktest.Messages(t, 3))
}

// TestSink_LimitsAreRefusedBeforePublishing: a payload over
// Config.MaxMessageBytes and headers over the relay's header budget fail
// permanently without being sent (the channel is never closed over them),
// and a row's Idempotency-Key header, in any case, never reaches the queue
// beside message_id.
func TestSink_LimitsAreRefusedBeforePublishing(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, sinktest.Topic, nil)
	s, logs := newSinkLogged(t, v, func(c *rabbitmq.Config) { c.MaxMessageBytes = 1024 })
	waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })
	msgs := sinktest.Messages(t, 4)
	msgs[0].Payload = make([]byte, 1024)
	msgs[1].Payload = make([]byte, 1025)
	msgs[2].Headers = map[string]string{"x-big": strings.Repeat("h", sinks.HeaderBytesMax)}
	msgs[3].Headers = map[string]string{"Idempotency-Key": "forged", "idempotency-key": "forged-too", "x-tenant": "acme"}
	errs := deliver(t, s, msgs)
	var limit *sinks.LimitError
	if !sinks.IsPermanent(errs[1]) || !errors.As(errs[1], &limit) || limit.Size != 1025 || limit.Max != 1024 || !strings.Contains(errs[1].Error(), "RABBITMQ_MAX_MESSAGE_BYTES") {
		t.Errorf("payload of 1025 bytes: %v, want a permanent *LimitError naming RABBITMQ_MAX_MESSAGE_BYTES", errs[1])
	}
	if !sinks.IsPermanent(errs[2]) || !errors.As(errs[2], &limit) || limit.Max != sinks.HeaderBytesMax {
		t.Errorf("headers over the budget: %v, want a permanent *LimitError", errs[2])
	}
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("messages that fit: %v, %v", errs[0], errs[3])
	}
	got := v.WaitTake(t, queue, 2, 15*time.Second)
	if len(got) != 2 {
		t.Fatalf("the queue holds %d messages, want 2", len(got))
	}
	for _, d := range got {
		for k, val := range d.Headers {
			if strings.EqualFold(k, "Idempotency-Key") {
				t.Errorf("message %s carries the row's %s: %v", d.MessageId, k, val)
			}
		}
	}
	if len(logs.Lines("closed the channel")) != 0 {
		t.Error("the broker closed the channel: a message over a limit was sent")
	}
}
