package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

var tracingBase = []string{"DATABASE_URL=postgres://x@127.0.0.1/db", "NATS_URL=nats://127.0.0.1:4222", "OTEL_TRACES_EXPORTER=otlp"}

func TestTracing_SettingsFollowTheSpec(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  []string
		want tracing
	}{
		{nil, tracing{Enabled: true, Protocol: "http/protobuf", SamplerRatio: 1,
			Resource: map[string]string{"service.name": "outbox-relay", "service.version": "test"}}},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=https://collector:4318/"}, tracing{Enabled: true, Protocol: "http/protobuf", SamplerRatio: 1,
			Endpoint: "https://collector:4318/v1/traces", Resource: map[string]string{"service.name": "outbox-relay", "service.version": "test"}}},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, tracing{Enabled: true, Protocol: "grpc", SamplerRatio: 1,
			Endpoint: "http://collector:4317", Resource: map[string]string{"service.name": "outbox-relay", "service.version": "test"}}},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=https://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://b/x"}, tracing{Enabled: true, Protocol: "http/protobuf", SamplerRatio: 1,
			Endpoint: "https://b/x", Resource: map[string]string{"service.name": "outbox-relay", "service.version": "test"}}},
		{[]string{"OTEL_RESOURCE_ATTRIBUTES=service.name=from-attrs,team=a%2Cb", "OTEL_EXPORTER_OTLP_HEADERS=api-key=k%3D1"}, tracing{Enabled: true, Protocol: "http/protobuf", SamplerRatio: 1,
			Headers: map[string]string{"api-key": "k=1"}, Resource: map[string]string{"service.name": "from-attrs", "team": "a,b", "service.version": "test"}}},
		{[]string{"OTEL_RESOURCE_ATTRIBUTES=service.name=from-attrs", "OTEL_SERVICE_NAME=wins", "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.1"},
			tracing{Enabled: true, Protocol: "http/protobuf", Sampler: "parentbased_traceidratio", SamplerRatio: 0.1,
				Resource: map[string]string{"service.name": "wins", "service.version": "test"}}},
	}
	for _, c := range cases {
		got := mustSettings(t, append(append([]string{}, tracingBase...), c.env...)).Tracing
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v:\n got %+v\nwant %+v", c.env, got, c.want)
		}
	}
	if off := mustSettings(t, append(tracingBase[:2:2], "OTEL_EXPORTER_OTLP_PROTOCOL=http/json")); off.Tracing.Enabled || off.Relay.TracerProvider != nil {
		t.Errorf("without OTEL_TRACES_EXPORTER: %+v, want off (and the other OTEL_ variables unread)", off.Tracing)
	}
}

func TestTracing_BadValuesAreRefusedNamingTheVariable(t *testing.T) {
	t.Parallel()
	for _, kv := range []string{
		"OTEL_TRACES_EXPORTER=jaeger", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json", "OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=ftp://x", "OTEL_EXPORTER_OTLP_HEADERS=api-key", "OTEL_RESOURCE_ATTRIBUTES=team=%zz",
		"OTEL_TRACES_SAMPLER=jaeger_remote", "OTEL_TRACES_SAMPLER_ARG=0.5",
	} {
		_, err := loadConfig(append(append([]string{}, tracingBase...), kv))
		name, _, _ := strings.Cut(kv, "=")
		var ce *configError
		if !errors.As(err, &ce) || ce.Var != name {
			t.Errorf("%s: %v, want an error naming %s", kv, err, name)
		}
	}
	if _, err := loadConfig(append(append([]string{}, tracingBase...), "OTEL_EXPORTER_OTLP_HEADERS=api-key=hunter2,bad")); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("bad headers: %v, want an error that does not show them", err)
	}
}

// A header no request can carry (a line break in a value, raw or
// URL-encoded; a name that is not a token) and the parts of an endpoint
// URL the exporters drop (user info, a query) are refused at start,
// naming the variable and never showing the secret; credentials go in
// OTEL_EXPORTER_OTLP_HEADERS.
func TestTracing_HeadersNoRequestCarriesAndDroppedURLPartsAreRefused(t *testing.T) {
	t.Parallel()
	for _, kv := range []string{
		"OTEL_EXPORTER_OTLP_HEADERS=api-key=hunter2\nx-team=payments",
		"OTEL_EXPORTER_OTLP_HEADERS=api-key=hunter2%0D%0Ax-injected:1",
		"OTEL_EXPORTER_OTLP_HEADERS=x-team=a,api key=hunter2",
		"OTEL_EXPORTER_OTLP_HEADERS=api-key=hunter2%00",
		"OTEL_EXPORTER_OTLP_ENDPOINT=https://relay:hunter2@collector:4318",
		"OTEL_EXPORTER_OTLP_ENDPOINT=https://collector:4318/?api_key=hunter2",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://hunter2@collector/v1/traces",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://collector/v1/traces?token=hunter2",
	} {
		_, err := loadConfig(append(append([]string{}, tracingBase...), kv))
		name, _, _ := strings.Cut(kv, "=")
		var ce *configError
		if !errors.As(err, &ce) || ce.Var != name || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: %v, want an error naming %s that does not show the secret", kv, err, name)
			continue
		}
		if strings.HasSuffix(name, "ENDPOINT") && !strings.Contains(err.Error(), "give credentials in OTEL_EXPORTER_OTLP_HEADERS") {
			t.Errorf("%q: %v, want it to point at OTEL_EXPORTER_OTLP_HEADERS", kv, err)
		}
	}
	// A tab may be in a value; spaces around pairs are trimmed.
	s := mustSettings(t, append(append([]string{}, tracingBase...), "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20t\tk , x-team=a\n"))
	if want := map[string]string{"authorization": "Bearer t\tk", "x-team": "a"}; !reflect.DeepEqual(s.Tracing.Headers, want) {
		t.Errorf("headers %q, want %q", s.Tracing.Headers, want)
	}
}

// The tracer provider applies the settings: headers and endpoint reach
// the export requests, the resource and the sampler the spans.
func TestTracing_ProviderAppliesTheSettings(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		if r.URL.Path != "/custom" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	s := mustSettings(t, append(append([]string{}, tracingBase...), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+srv.URL+"/custom",
		"OTEL_EXPORTER_OTLP_HEADERS=api-key=s3cret", "OTEL_SERVICE_NAME=orders-relay"))
	log := slog.New(slog.DiscardHandler)
	tp, stop, err := newTracerProvider(context.Background(), s.Tracing, log)
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp.RegisterSpanProcessor(rec)
	_, span := tp.Tracer("test").Start(context.Background(), "x")
	span.End()
	stop()
	mu.Lock()
	if got.Get("api-key") != "s3cret" {
		t.Errorf("export request headers %v, want api-key from OTEL_EXPORTER_OTLP_HEADERS", got)
	}
	mu.Unlock()
	if res := rec.Ended()[0].Resource(); !strings.Contains(res.String(), "service.name=orders-relay") {
		t.Errorf("resource %s, want OTEL_SERVICE_NAME", res)
	}

	s = mustSettings(t, append(append([]string{}, tracingBase...), "OTEL_TRACES_SAMPLER=traceidratio", "OTEL_TRACES_SAMPLER_ARG=0"))
	tp, stop, err = newTracerProvider(context.Background(), s.Tracing, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, span := tp.Tracer("test").Start(context.Background(), "x"); span.IsRecording() {
		t.Error("a ratio of 0 records spans")
	}
}
