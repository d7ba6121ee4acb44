package cli

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// otlpReceiver is an OTLP/HTTP receiver: it takes POST /v1/traces in
// protobuf and keeps the spans, each with its resource.
type otlpReceiver struct {
	URL string

	mu       sync.Mutex
	requests []*coltracepb.ExportTraceServiceRequest
	headers  []http.Header
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver: %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "not OTLP/HTTP protobuf", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(body, req)
		}
		if err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		rcv.requests = append(rcv.requests, req)
		rcv.headers = append(rcv.headers, r.Header.Clone())
		rcv.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	rcv.URL = srv.URL
	return rcv
}

// receivedSpan is a span as exported, with its resource.
type receivedSpan struct {
	*tracepb.Span
	Resource map[string]string
}

func (r *otlpReceiver) spans() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, req := range r.requests {
		for _, rs := range req.ResourceSpans {
			res := map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				res[kv.Key] = anyString(kv.Value)
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, receivedSpan{Span: s, Resource: res})
				}
			}
		}
	}
	return out
}

// firstRequestJSON is the first export request, as JSON.
func (r *otlpReceiver) firstRequestJSON() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.requests) == 0 {
		return ""
	}
	return protojson.MarshalOptions{Multiline: true, Indent: "  "}.Format(r.requests[0])
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

func spanAttrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.Key] = anyString(kv.Value)
	}
	return out
}

// linkedTraceparents returns the traceparent each span links to, by
// messaging.message.id, for the spans received.
func linkedTraceparents(spans []receivedSpan) map[string]string {
	out := map[string]string{}
	for _, s := range spans {
		for _, l := range s.Links {
			out[spanAttrs(l.Attributes)["messaging.message.id"]] = fmt.Sprintf("00-%s-%s-%02x", hex.EncodeToString(l.TraceId), hex.EncodeToString(l.SpanId), l.Flags&0xff)
		}
	}
	return out
}

// insertTracedRows inserts n rows on topic, each with a traceparent of
// its own (from its number) and a tracestate, and returns the
// traceparents by idempotency key.
func insertTracedRows(t *testing.T, db *dbtest.Schema, topic string, n int) map[string]string {
	t.Helper()
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, headers)
SELECT $1, convert_to('{"seq": ' || i || '}', 'UTF8'), 'evt-' || i,
       jsonb_build_object('traceparent', '00-' || lpad(to_hex(i), 32, 'a') || '-' || lpad(to_hex(i), 16, 'b') || '-01', 'tracestate', 'rojo=00f067aa0ba902b7')
  FROM generate_series(1, $2) AS i`, topic, n)
	want := map[string]string{}
	for i := 1; i <= n; i++ {
		h := fmt.Sprintf("%x", i)
		want[fmt.Sprintf("evt-%d", i)] = "00-" + strings.Repeat("a", 32-len(h)) + h + "-" + strings.Repeat("b", 16-len(h)) + h + "-01"
	}
	return want
}

func TestProcess_TracingExportsLinkedSpansAndKeepsTheRowsTraceparent(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	otlp := newOTLPReceiver(t)
	p := startProcess(t, relayEnv(db, srv,
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_EXPORTER_OTLP_HEADERS=api-key=s3cret%20key", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test")...)
	p.waitLog(`"tracing on"`)
	const n = 50
	want := insertTracedRows(t, db, "events.orders.created", n)
	relaytest.WaitDrained(t, db, relaytest.Budget(n))

	var spans []receivedSpan
	waitfor.Condition(t, 30*time.Second, "spans linked to every row", func() bool {
		spans = otlp.spans()
		return len(linkedTraceparents(spans)) >= n
	})
	if got := linkedTraceparents(spans); len(got) != n {
		t.Errorf("%d rows linked, want %d", len(got), n)
	}
	for key, tp := range linkedTraceparents(spans) {
		if want[key] != tp {
			t.Errorf("row %s is linked to %s, want its traceparent %s", key, tp, want[key])
		}
	}
	for _, s := range spans {
		a := spanAttrs(s.Attributes)
		if s.Name != "send nats" || s.Kind != tracepb.Span_SPAN_KIND_CLIENT || len(s.ParentSpanId) != 0 {
			t.Errorf("span %q, kind %s, parent %x: want send nats (the sink), a client root span", s.Name, s.Kind, s.ParentSpanId)
		}
		for k, v := range map[string]string{"messaging.system": "nats", "messaging.destination.name": "events.orders.created",
			"messaging.operation.type": "send", "outbox_relay.sink": "nats", "outbox_relay.schema": db.Name} {
			if a[k] != v {
				t.Errorf("span %s: %s = %q, want %q", s.Name, k, a[k], v)
			}
		}
		if s.Resource["service.name"] != "outbox-relay" || s.Resource["deployment.environment.name"] != "test" {
			t.Errorf("resource %v: want service.name outbox-relay and OTEL_RESOURCE_ATTRIBUTES", s.Resource)
		}
	}
	otlp.mu.Lock()
	if got := otlp.headers[0].Get("api-key"); got != "s3cret key" {
		t.Errorf("export request header api-key = %q, want OTEL_EXPORTER_OTLP_HEADERS's", got)
	}
	otlp.mu.Unlock()
	if path := os.Getenv("TRACE_EXAMPLE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(otlp.firstRequestJSON()), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// On the wire, each message carries its row's traceparent byte for
	// byte, not the relay's.
	msgs := srv.Messages(t, "EVENTS")
	if len(msgs) != n {
		t.Fatalf("%d messages in the stream, want %d", len(msgs), n)
	}
	for _, m := range msgs {
		key := m.Header.Get("Nats-Msg-Id")
		if got := m.Header.Get("traceparent"); got != want[key] {
			t.Errorf("message %s carries traceparent %q, want the row's %q", key, got, want[key])
		}
	}
	for _, line := range p.log() {
		if strings.Contains(line, "s3cret") {
			t.Errorf("the log shows OTEL_EXPORTER_OTLP_HEADERS: %s", line)
		}
	}
}

// The batch processor exports every minute here: the spans arrive only
// because the relay flushes them at exit, after the drain.
func TestProcess_TracingFlushesTheLastSpansAtExit(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	otlp := newOTLPReceiver(t)
	p := startProcess(t, relayEnv(db, srv,
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+otlp.URL+"/v1/traces", "OTEL_BSP_SCHEDULE_DELAY=60000")...)
	p.waitLog(`"tracing on"`)
	want := insertTracedRows(t, db, "events.orders.paid", 5)
	relaytest.WaitDrained(t, db, 30*time.Second)
	if got := len(otlp.spans()); got != 0 {
		t.Fatalf("%d spans exported before the exit, with OTEL_BSP_SCHEDULE_DELAY=60000: the test proves nothing", got)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(20 * time.Second); code != exitOK {
		t.Fatalf("exit code %d, want 0", code)
	}
	if got := linkedTraceparents(otlp.spans()); len(got) != len(want) {
		t.Errorf("%d rows linked by the spans flushed at exit, want %d", len(got), len(want))
	}
}

func TestProcess_OTEL_TRACES_EXPORTERUnknownIsRefusedNamingIt(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{
		{"OTEL_TRACES_EXPORTER=bogus"},
		{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"},
		{"RELAY_TRACE_INJECT=true"},
	} {
		p := startProcess(t, append([]string{"DATABASE_URL=postgres://relay@127.0.0.1:1/app", "NATS_URL=nats://127.0.0.1:4222"}, env...)...)
		if code := p.wait(20 * time.Second); code != exitUsage {
			t.Errorf("%v: exit code %d, want %d", env, code, exitUsage)
		}
		name, _, _ := strings.Cut(env[len(env)-1], "=")
		if log := strings.Join(p.log(), "\n"); !strings.Contains(log, name) {
			t.Errorf("%v: the error does not name %s: %s", env, name, log)
		}
	}
}
