package redis

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-relay/outbox-relay/sinks"
)

var _ sinks.Traced = (*Sink)(nil)

// TraceDestination is the stream m is appended to.
func (s *Sink) TraceDestination(m *sinks.Message) string { return s.cfg.StreamPrefix + m.Topic }

// TraceAttributes are messaging.system redis and the server's address.
func (s *Sink) TraceAttributes() []attribute.KeyValue { return s.traceAttrs }

func traceAttributes(addr string) []attribute.KeyValue {
	return append([]attribute.KeyValue{semconv.MessagingSystemKey.String("redis")}, sinks.ServerAttributes(addr, 6379)...)
}
