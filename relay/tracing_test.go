package relay_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// recorder is a tracer provider whose spans are kept in memory.
func recorder(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// attrs returns the attributes of kvs by key.
func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	out := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		out[kv.Key] = kv.Value
	}
	return out
}

// insertTraced inserts n rows on topic, row i (from first) with a
// traceparent of its own (trace id from its number, span id from the
// topic) and a tracestate.
func insertTraced(t testing.TB, b *bundle, topic string, first, n int) {
	t.Helper()
	b.db.Exec(t, `
INSERT INTO %s.messages (topic, payload, idempotency_key, headers)
SELECT $1, convert_to('event ' || i, 'UTF8'), $1 || '-' || i,
       jsonb_build_object('traceparent', '00-' || lpad(to_hex(i), 32, '0') || '-' || substr(md5($1), 1, 16) || '-01',
                          'tracestate', 'vendor=row' || i)
  FROM generate_series($2::int, $2::int + $3::int - 1) AS i`, topic, first, n)
}

// rowTraceparent is the traceparent insertTraced gives row i of topic.
func rowTraceparent(topic string, i int) string {
	return fmt.Sprintf("00-%032x-%s-01", i, md5hex(topic)[:16])
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// ended waits until the spans recorded have covered want messages, and
// returns them.
func ended(t *testing.T, rec *tracetest.SpanRecorder, want int, count func(sdktrace.ReadOnlySpan) int) []sdktrace.ReadOnlySpan {
	t.Helper()
	var spans []sdktrace.ReadOnlySpan
	waitfor.Condition(t, relaytest.Budget(want), fmt.Sprintf("spans covering %d messages", want), func() bool {
		spans = rec.Ended()
		n := 0
		for _, s := range spans {
			n += count(s)
		}
		return n >= want
	})
	return spans
}

func delivered(s sdktrace.ReadOnlySpan) int {
	return int(attrs(s.Attributes())["outbox_relay.delivered"].AsInt64())
}

func TestTracing_OneSpanPerDestinationLinkedToEveryRowsTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp, rec := recorder(t)
	// Both topics in every claim: the rows are inserted before the relay
	// starts.
	insertTraced(t, b, "events.orders", 1, 20)
	insertTraced(t, b, "events.payments", 1, 15)
	cfg := b.config(t)
	cfg.TracerProvider = tp
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	spans := ended(t, rec, 35, delivered)

	linked := map[string]sdktrace.Link{}
	byDest := map[string]int{}
	for _, s := range spans {
		a := attrs(s.Attributes())
		dest := a["messaging.destination.name"].AsString()
		byDest[dest]++
		if s.Name() != "send nats" || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %q of kind %s for destination %q: want send nats (the sink), client", s.Name(), s.SpanKind(), dest)
		}
		if s.Parent().IsValid() {
			t.Errorf("span %s has a parent %s: want a root span, linked to the rows", s.Name(), s.Parent().SpanID())
		}
		want := map[attribute.Key]string{
			"messaging.system": "nats", "messaging.operation.type": "send", "messaging.operation.name": "send",
			"server.address": "127.0.0.1", "outbox_relay.schema": b.db.Name, "outbox_relay.mode": "unordered", "outbox_relay.sink": "nats",
		}
		for k, v := range want {
			if got := a[k].Emit(); got != v {
				t.Errorf("span %s: %s = %q, want %q", s.Name(), k, got, v)
			}
		}
		if a["server.port"].AsInt64() == 0 || a["outbox_relay.failed"].AsInt64() != 0 || s.Status().Code == codes.Error {
			t.Errorf("span %s: server.port %v, failed %v, status %v", s.Name(), a["server.port"].Emit(), a["outbox_relay.failed"].Emit(), s.Status())
		}
		if n := len(s.Links()); n != delivered(s) || n > 1 && a["messaging.batch.message_count"].AsInt64() != int64(n) {
			t.Errorf("span %s: %d links, %d delivered, batch count %s", s.Name(), n, delivered(s), a["messaging.batch.message_count"].Emit())
		}
		for _, l := range s.Links() {
			la := attrs(l.Attributes)
			id := la["messaging.message.id"].AsString()
			if !strings.HasPrefix(id, dest+"-") {
				t.Errorf("span %s links message %s of another destination", s.Name(), id)
			}
			if la["outbox_relay.attempt"].AsInt64() != 1 || la["outbox_relay.outbox_wait_ms"].Type() != attribute.INT64 {
				t.Errorf("link of %s: attempt %s, outbox_wait_ms %s", id, la["outbox_relay.attempt"].Emit(), la["outbox_relay.outbox_wait_ms"].Emit())
			}
			if wait := la["outbox_relay.outbox_wait_ms"].AsInt64(); wait < 0 || wait > 60_000 {
				t.Errorf("link of %s: outbox_wait_ms %d", id, wait)
			}
			linked[id] = l
		}
	}
	if byDest["events.orders"] == 0 || byDest["events.payments"] == 0 || len(byDest) != 2 {
		t.Errorf("spans by destination %v: want events.orders and events.payments", byDest)
	}
	for topic, n := range map[string]int{"events.orders": 20, "events.payments": 15} {
		for i := 1; i <= n; i++ {
			id := fmt.Sprintf("%s-%d", topic, i)
			l, ok := linked[id]
			if !ok {
				t.Errorf("no span links %s", id)
				continue
			}
			sc := l.SpanContext
			if got := fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags()); got != rowTraceparent(topic, i) {
				t.Errorf("%s is linked to %s, want its traceparent %s", id, got, rowTraceparent(topic, i))
			}
			if got := sc.TraceState().String(); got != fmt.Sprintf("vendor=row%d", i) {
				t.Errorf("%s is linked with tracestate %q, want its own", id, got)
			}
		}
	}
	// The rows' own trace context reaches the subscribers unchanged.
	for _, m := range b.nats.Messages(t, stream) {
		var topic string
		var i int
		if _, err := fmt.Sscanf(strings.Replace(m.Header.Get("Nats-Msg-Id"), "-", " ", 1), "%s %d", &topic, &i); err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get("traceparent"); got != rowTraceparent(topic, i) {
			t.Errorf("message %s carries traceparent %q, want the row's %q", m.Header.Get("Nats-Msg-Id"), got, rowTraceparent(topic, i))
		}
	}
}

// A span's name is the sink's, whatever the rows' topics: a producer
// chooses its topic, and a name made of it would give the tracing backend
// as many span names as there are topics. The destination stays an
// attribute, cut to 200 bytes and its length.
func TestTracing_SpansAreNamedAfterTheSinkAndTheDestinationIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp, rec := recorder(t)
	long := "events." + strings.Repeat("x", 243) // 250 bytes: within every sink's limit
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ($1, 'x', 'long-1'), ($1, 'y', 'long-2'), ('events.orders.42', 'z', 'short')`, long)
	cfg := b.config(t)
	cfg.TracerProvider = tp
	relaytest.Start(t, b.db.Pool, cfg)
	spans := ended(t, rec, 3, delivered)
	dests := map[string]bool{}
	for _, s := range spans {
		if s.Name() != "send nats" {
			t.Errorf("span named %.80q…: want send nats, the sink's name", s.Name())
		}
		dests[attrs(s.Attributes())["messaging.destination.name"].AsString()] = true
	}
	cut := long[:200] + "…(250 bytes)"
	if !dests[cut] || !dests["events.orders.42"] || len(dests) != 2 {
		t.Errorf("destinations %v: want %q and events.orders.42", dests, cut)
	}
}

func TestTracing_LinksAreCappedAt128PerSpan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp, rec := recorder(t)
	// Two claim loops may split the rows between their claims (each skips
	// the rows the other locked): with 2,000 rows some span holds more
	// than 128 of them however they are split.
	insertTraced(t, b, "events.bulk", 1, 2000)
	cfg := b.config(t)
	cfg.TracerProvider = tp
	relaytest.Start(t, b.db.Pool, cfg)
	spans := ended(t, rec, 2000, delivered)
	over := 0
	for _, s := range spans {
		a := attrs(s.Attributes())
		n := max(a["messaging.batch.message_count"].AsInt64(), 1)
		if n > 128 {
			over++
		}
		if want := min(n, 128); int64(len(s.Links())) != want || a["outbox_relay.links_dropped"].AsInt64() != n-want {
			t.Errorf("a span of %d messages has %d links, links_dropped %s: want %d, %d",
				n, len(s.Links()), a["outbox_relay.links_dropped"].Emit(), want, n-want)
		}
	}
	if over == 0 {
		t.Errorf("no span of more than 128 messages among %d spans", len(spans))
	}
}

func TestTracing_FailedMessagesSetErrorTypeAndStatusAndTheirLogLinesTheTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp, rec := recorder(t)
	// No stream captures stray.>: retried. $JS.… is the control plane:
	// dead-lettered as permanent at once.
	insertTraced(t, b, "stray.orders", 1, 3)
	insertTraced(t, b, "$JS.API.STREAM.DELETE.EVENTS", 1, 1)
	insertTraced(t, b, "events.fine", 1, 2)
	cfg := b.config(t)
	cfg.TracerProvider = tp
	var logs *testlog.Buffer
	cfg.Logger, logs = testlog.NewJSON(t, slog.LevelInfo)
	cfg.BackoffMin, cfg.BackoffMax = time.Minute, time.Minute
	relaytest.Start(t, b.db.Pool, cfg)
	spans := ended(t, rec, 6, func(s sdktrace.ReadOnlySpan) int {
		return delivered(s) + int(attrs(s.Attributes())["outbox_relay.failed"].AsInt64())
	})
	byDest := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byDest[attrs(s.Attributes())["messaging.destination.name"].AsString()] = s
	}
	for dest, want := range map[string]string{"stray.orders": "retry", "$JS.API.STREAM.DELETE.EVENTS": "permanent", "events.fine": ""} {
		s, ok := byDest[dest]
		if !ok {
			t.Errorf("no span for %s", dest)
			continue
		}
		a := attrs(s.Attributes())
		got := a["error.type"].AsString()
		if got != want || (want != "") != (s.Status().Code == codes.Error) {
			t.Errorf("span %s: error.type %q, status %v; want %q", s.Name(), got, s.Status(), want)
		}
	}
	waitfor.Condition(t, 10*time.Second, "the failure log lines", func() bool {
		return len(logs.Records("delivery failed; retrying")) > 0 && len(logs.Records("delivery failed; dead-lettered")) > 0
	})
	for msg, dest := range map[string]string{"delivery failed; retrying": "stray.orders", "delivery failed; dead-lettered": "$JS.API.STREAM.DELETE.EVENTS"} {
		line := logs.Records(msg)[0]
		sc := byDest[dest].SpanContext()
		if line["trace_id"] != sc.TraceID().String() || line["span_id"] != sc.SpanID().String() {
			t.Errorf("%q line has trace_id %v span_id %v, want the span of %s: %s %s", msg, line["trace_id"], line["span_id"], dest, sc.TraceID(), sc.SpanID())
		}
	}
}

func TestTracing_InjectGivesRowsWithoutTraceparentTheSpansAndKeepsTheOthers(t *testing.T) {
	t.Parallel()
	for _, inject := range []bool{false, true} {
		t.Run(fmt.Sprintf("inject=%v", inject), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			tp, rec := recorder(t)
			insertTraced(t, b, "events.traced", 1, 3)
			b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, headers)
VALUES ('events.bare', 'x', 'bare-1', NULL), ('events.bare', 'y', 'bare-2', '{"x-tenant": "acme"}')`)
			cfg := b.config(t)
			cfg.TracerProvider, cfg.TraceInject = tp, inject
			relaytest.Start(t, b.db.Pool, cfg)
			spans := ended(t, rec, 5, delivered)
			spanOf := map[string]trace.SpanContext{}
			for _, s := range spans {
				spanOf[attrs(s.Attributes())["messaging.destination.name"].AsString()] = s.SpanContext()
			}
			for _, m := range b.nats.Messages(t, stream) {
				id, got := m.Header.Get("Nats-Msg-Id"), m.Header.Get("traceparent")
				switch {
				case m.Subject == "events.traced":
					var i int
					_, _ = fmt.Sscanf(id, "events.traced-%d", &i)
					if got != rowTraceparent("events.traced", i) {
						t.Errorf("%s carries %q, want the row's own %q", id, got, rowTraceparent("events.traced", i))
					}
				case !inject && got != "":
					t.Errorf("%s carries traceparent %q without RELAY_TRACE_INJECT", id, got)
				case inject:
					sc := spanOf["events.bare"]
					if want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID()); got != want {
						t.Errorf("%s carries traceparent %q, want its span's %q", id, got, want)
					}
				}
				if id == "bare-2" && m.Header.Get("x-tenant") != "acme" {
					t.Errorf("%s lost its own header: %v", id, m.Header)
				}
			}
		})
	}
}

func TestTracing_WebhookSpansCarryHTTPAttributesWithoutThePath(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	secrets, err := webhook.ParseSecrets(rcv.Secret)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(rcv.URL)
	sink, err := webhook.New(webhook.Config{URL: rcv.URL + "?token=s3cret", Secrets: secrets, Timeout: 2 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	tp, rec := recorder(t)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, headers)
VALUES ('orders.created', '{}', 'hook-1', '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}')`)
	cfg := (&bundle{db: db}).config(t)
	cfg.Sinks = map[string]sinks.Sink{"webhook": sink}
	cfg.TracerProvider = tp
	relaytest.Start(t, db.Pool, cfg)
	spans := ended(t, rec, 1, delivered)
	s := spans[0]
	a := attrs(s.Attributes())
	want := map[attribute.Key]string{
		"http.request.method": "POST", "url.full": "http://" + u.Host + "/REDACTED",
		"server.address": u.Hostname(), "server.port": u.Port(), "outbox_relay.sink": "webhook",
	}
	for k, v := range want {
		if got := a[k].Emit(); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []attribute.Key{"messaging.system", "messaging.destination.name", "messaging.batch.message_count"} {
		if _, ok := a[k]; ok {
			t.Errorf("a webhook span has %s", k)
		}
	}
	if s.Name() != "send webhook" || len(s.Links()) != 1 || s.Links()[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("span %q with links %v: want send webhook linked to the row's trace", s.Name(), s.Links())
	}
	if got := rcv.Requests()[0].Header.Get("traceparent"); got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("the receiver got traceparent %q, want the row's", got)
	}
}

// Without a TracerProvider the relay makes no span, even when the process
// has a global one, and adds no header.
func TestTracing_OffMakesNoSpans(t *testing.T) {
	b := setup(t)
	tp, rec := recorder(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.a', 'x', 'a-1')`)
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	if n := len(rec.Ended()) + len(rec.Started()); n != 0 {
		t.Errorf("%d spans with tracing off", n)
	}
	for _, m := range b.nats.Messages(t, stream) {
		if got := m.Header.Get("traceparent"); got != "" {
			t.Errorf("message carries traceparent %q with tracing off", got)
		}
	}
}
