package webhook

import (
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-relay/outbox-relay/sinks"
)

var _ sinks.Traced = (*Sink)(nil)

// redactedPath stands for the URL's path in traces: the path may hold a
// secret (Slack and Teams put their token in it), so that, like the
// credentials and the query, it is never exported. REDACTED is the
// semantic conventions' word for scrubbed parts of url.full.
const redactedPath = "/REDACTED"

// TraceDestination is the endpoint's host (and port when the URL names
// one); the path is never shown (see redactedPath).
func (s *Sink) TraceDestination(*sinks.Message) string { return s.traceDest }

// TraceAttributes are the HTTP client attributes of the requests:
// http.request.method POST, url.full without credentials, query or path,
// server.address and server.port.
func (s *Sink) TraceAttributes() []attribute.KeyValue { return s.traceAttrs }

// traceAttributes returns the destination and attributes of raw, the URL.
func traceAttributes(raw string) (string, []attribute.KeyValue) {
	u, err := url.Parse(raw)
	if err != nil {
		return "webhook", []attribute.KeyValue{semconv.HTTPRequestMethodPost}
	}
	full := url.URL{Scheme: u.Scheme, Host: u.Host}
	if u.Path != "" && u.Path != "/" {
		full.Path = redactedPath
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodPost, semconv.URLFull(full.String())}
	return u.Host, append(attrs, sinks.URLServerAttributes(raw, map[string]int{"http": 80, "https": 443})...)
}
