package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// tracingEnv is the configuration of tracing: the OpenTelemetry SDK's
// standard variables, which the relay reads itself so that they are
// validated and documented with the others, and its own
// RELAY_TRACE_INJECT. Off unless OTEL_TRACES_EXPORTER=otlp; the other
// OTEL_ variables are read only then. The SDK reads further OTEL_
// variables itself (OTEL_BSP_*, OTEL_EXPORTER_OTLP_TIMEOUT, _CERTIFICATE,
// _COMPRESSION, OTEL_SPAN_*_LIMIT), as it documents.
type tracingEnv struct {
	Exporter           string `env:"OTEL_TRACES_EXPORTER" doc:"otlp turns tracing on: one span per batch, sink and destination, exported over OTLP and linked to each row's traceparent (docs/tracing.md). Unset or none: off, with no exporter, no goroutine and no cost in the delivery path. The other OTEL_ variables are read only with otlp." allowed:"otlp or none"`
	Endpoint           string `env:"OTEL_EXPORTER_OTLP_ENDPOINT" doc:"Base URL of the OTLP receiver (a collector): /v1/traces is appended for http/protobuf, the URL is used as it is for grpc. Default: http://localhost:4318 (http/protobuf), http://localhost:4317 (grpc)." allowed:"an http:// or https:// URL without user info or query (credentials go in OTEL_EXPORTER_OTLP_HEADERS)"`
	TracesEndpoint     string `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" doc:"Full URL spans are sent to; overrides OTEL_EXPORTER_OTLP_ENDPOINT, and nothing is appended." allowed:"an http:// or https:// URL without user info or query (credentials go in OTEL_EXPORTER_OTLP_HEADERS)"`
	Protocol           string `env:"OTEL_EXPORTER_OTLP_PROTOCOL" envDefault:"http/protobuf" doc:"OTLP transport." allowed:"http/protobuf or grpc"`
	Headers            string `env:"OTEL_EXPORTER_OTLP_HEADERS" redact:"may hold credentials" doc:"Headers of every export request, like an API key of the tracing backend. Never logged." allowed:"key=value pairs separated by commas, values URL-encoded (api-key=abc,x-team=payments); names are HTTP tokens, values hold no line break or other control character"`
	ServiceName        string `env:"OTEL_SERVICE_NAME" doc:"service.name of the spans. Default: the service.name of OTEL_RESOURCE_ATTRIBUTES, else outbox-relay." allowed:"a name"`
	ResourceAttributes string `env:"OTEL_RESOURCE_ATTRIBUTES" doc:"More attributes of the resource the spans come from, like deployment.environment.name=prod." allowed:"key=value pairs separated by commas, values URL-encoded"`
	Sampler            string `env:"OTEL_TRACES_SAMPLER" doc:"Which spans are kept. The relay's spans are roots, so the parentbased_ samplers act as their root sampler. Default: parentbased_always_on (every span)." allowed:"always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"`
	SamplerArg         string `env:"OTEL_TRACES_SAMPLER_ARG" doc:"The ratio of spans kept by the traceidratio samplers. Default 1." allowed:"a number from 0 to 1, like 0.1; with a traceidratio sampler"`
	Inject             bool   `env:"RELAY_TRACE_INJECT" envDefault:"false" doc:"Give a message whose row has no traceparent header that of the relay's send span, so that its consumers continue the relay's trace. A row's own traceparent is always sent unchanged." allowed:"true or false; needs OTEL_TRACES_EXPORTER=otlp"`
}

// Trace protocols (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	protocolHTTP = "http/protobuf"
	protocolGRPC = "grpc"
)

// tracingShutdownTimeout bounds the flush of the last spans at exit.
const tracingShutdownTimeout = 5 * time.Second

var samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

func (e *tracingEnv) enabled() bool { return e.Exporter == "otlp" }

// validate checks the tracing variables; those of the SDK only when
// tracing is on, as the SDK would read them.
func (e *tracingEnv) validate(c *config) error {
	switch e.Exporter {
	case "", "none", "otlp":
	default:
		return c.refuse("OTEL_TRACES_EXPORTER", "only the OTLP exporter is built in")
	}
	if !e.enabled() {
		if e.Inject {
			return c.refuse("RELAY_TRACE_INJECT", "tracing is off (OTEL_TRACES_EXPORTER is not otlp)")
		}
		return nil
	}
	if e.Protocol != protocolHTTP && e.Protocol != protocolGRPC {
		return c.refuse("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		v := configField(name).value(c).String()
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c.refuse(name, "not an http:// or https:// URL")
		}
		// The exporters send neither: credentials or a token there would
		// be dropped without a word, and every export refused.
		var dropped string
		switch {
		case u.User != nil:
			dropped = "user info (user:password@) in the URL is never sent"
		case u.RawQuery != "" || u.ForceQuery:
			dropped = "a query string (?…) in the URL is never sent"
		case u.Fragment != "":
			dropped = "a fragment (#…) in the URL is never sent"
		}
		if dropped != "" {
			// The value without what may be a secret.
			return &configError{Var: name, Value: redactEndpoint(v), Allowed: configField(name).allowed(),
				Reason: dropped + ": give credentials in OTEL_EXPORTER_OTLP_HEADERS (like authorization=Bearer%20<token>)"}
		}
	}
	headers, err := parsePairs(e.Headers)
	if err != nil {
		return c.refuse("OTEL_EXPORTER_OTLP_HEADERS", err.Error())
	}
	if err := checkHeaders(headers); err != nil {
		return c.refuse("OTEL_EXPORTER_OTLP_HEADERS", err.Error())
	}
	if _, err := parsePairs(e.ResourceAttributes); err != nil {
		return c.refuse("OTEL_RESOURCE_ATTRIBUTES", err.Error())
	}
	if e.Sampler != "" && !slices.Contains(samplers, e.Sampler) {
		return c.refuse("OTEL_TRACES_SAMPLER", "unknown sampler")
	}
	if e.SamplerArg != "" {
		if !strings.HasSuffix(e.Sampler, "traceidratio") {
			return c.refuse("OTEL_TRACES_SAMPLER_ARG", "only the traceidratio samplers take an argument")
		}
		if f, err := strconv.ParseFloat(e.SamplerArg, 64); err != nil || f < 0 || f > 1 {
			return c.refuse("OTEL_TRACES_SAMPLER_ARG", "not a ratio")
		}
	}
	return nil
}

// tracing is the tracing configuration as the binary applies it.
type tracing struct {
	// Enabled: OTEL_TRACES_EXPORTER=otlp. Nothing else is used without it.
	Enabled  bool
	Protocol string
	// Endpoint is the URL spans are sent to; empty: the SDK's default.
	Endpoint string
	// Headers go with every export request.
	Headers map[string]string
	// Resource describes the relay: service.name, service.version and
	// OTEL_RESOURCE_ATTRIBUTES.
	Resource map[string]string
	// Sampler and SamplerRatio are OTEL_TRACES_SAMPLER and its argument;
	// an empty Sampler leaves the SDK's default.
	Sampler      string
	SamplerRatio float64
}

// settings maps the validated variables to tracing's settings.
func (e *tracingEnv) settings(version string) tracing {
	if !e.enabled() {
		return tracing{}
	}
	t := tracing{Enabled: true, Protocol: e.Protocol, Sampler: e.Sampler, SamplerRatio: 1}
	switch {
	case e.TracesEndpoint != "":
		t.Endpoint = e.TracesEndpoint
	case e.Endpoint != "" && e.Protocol == protocolHTTP:
		t.Endpoint = strings.TrimSuffix(e.Endpoint, "/") + "/v1/traces"
	default:
		t.Endpoint = e.Endpoint
	}
	t.Headers, _ = parsePairs(e.Headers)
	t.Resource, _ = parsePairs(e.ResourceAttributes)
	if t.Resource == nil {
		t.Resource = map[string]string{}
	}
	t.Resource[string(semconv.ServiceNameKey)] = cmp.Or(e.ServiceName, t.Resource[string(semconv.ServiceNameKey)], "outbox-relay")
	t.Resource[string(semconv.ServiceVersionKey)] = version
	if e.SamplerArg != "" {
		t.SamplerRatio, _ = strconv.ParseFloat(e.SamplerArg, 64)
	}
	return t
}

// parsePairs parses key=value pairs separated by commas, values
// URL-encoded, as OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES
// hold them. The error never repeats a value.
func parsePairs(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for i, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("pair %d is not key=value", i+1)
		}
		value, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of %s is not URL-encoded", k)
		}
		out[k] = value
	}
	return out, nil
}

// checkHeaders refuses export headers that no request can carry: a name
// that is not an HTTP token, a value with a line break or another control
// character (a URL-encoded %0A decodes to one). The exporter would take
// them and every export would fail. The error names the header, never its
// value.
func checkHeaders(h map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if !httpToken(k) {
			return fmt.Errorf("header name %q is not an HTTP token (letters, digits and !#$%%&'*+-.^_`|~)", k)
		}
		if strings.ContainsFunc(h[k], func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return fmt.Errorf("the value of %s has a line break or another control character, which no request can carry", k)
		}
	}
	return nil
}

// httpToken reports whether s is an HTTP token (RFC 9110), as a header
// name must be.
func httpToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// newTracerProvider returns the tracer provider of t, exporting in the
// background, and the function that flushes and stops it; nil and a
// no-op when tracing is off.
func newTracerProvider(ctx context.Context, t tracing, log *slog.Logger) (*sdktrace.TracerProvider, func(), error) {
	if !t.Enabled {
		return nil, func() {}, nil
	}
	var client otlptrace.Client
	if t.Protocol == protocolGRPC {
		var opts []otlptracegrpc.Option
		if t.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(t.Endpoint))
		}
		if len(t.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(t.Headers))
		}
		client = otlptracegrpc.NewClient(opts...)
	} else {
		var opts []otlptracehttp.Option
		if t.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(t.Endpoint))
		}
		if len(t.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(t.Headers))
		}
		client = otlptracehttp.NewClient(opts...)
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, nil, fmt.Errorf("start the trace exporter: %w", err)
	}
	attrs := make([]attribute.KeyValue, 0, len(t.Resource))
	for k, v := range t.Resource {
		attrs = append(attrs, attribute.String(k, v))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
	if err != nil {
		return nil, nil, fmt.Errorf("describe the trace resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)}
	if s := sampler(t.Sampler, t.SamplerRatio); s != nil {
		opts = append(opts, sdktrace.WithSampler(s))
	}
	// Export failures (a collector down) come here rather than to the
	// standard logger: the relay goes on, the spans of the batch are lost.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("trace export failed", "err", err)
	}))
	tp := sdktrace.NewTracerProvider(opts...)
	log.Info("tracing on", "protocol", t.Protocol, "endpoint", cmp.Or(redactEndpoint(t.Endpoint), "(the SDK's default)"),
		"service_name", t.Resource[string(semconv.ServiceNameKey)], "sampler", cmp.Or(t.Sampler, "parentbased_always_on"))
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("flush the last spans", "err", err)
		}
	}
	return tp, shutdown, nil
}

// sampler returns the sampler called name, nil for the SDK's default.
func sampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return nil
}

// redactEndpoint is an endpoint URL for the log: scheme, host and path.
func redactEndpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || raw == "" {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}
