package nats

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-relay/outbox-relay/sinks"
)

var _ sinks.Traced = (*Sink)(nil)

// TraceDestination is the subject m is published to.
func (s *Sink) TraceDestination(m *sinks.Message) string { return s.cfg.SubjectPrefix + m.Topic }

// TraceAttributes are messaging.system nats and the first server of the
// URL (without credentials).
func (s *Sink) TraceAttributes() []attribute.KeyValue { return s.traceAttrs }

func traceAttributes(urls string) []attribute.KeyValue {
	first, _, _ := strings.Cut(urls, ",")
	return append([]attribute.KeyValue{semconv.MessagingSystemKey.String("nats")},
		sinks.URLServerAttributes(strings.TrimSpace(first), map[string]int{"nats": 4222, "tls": 4222, "ws": 80, "wss": 443})...)
}
