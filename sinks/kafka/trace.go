package kafka

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-relay/outbox-relay/sinks"
)

var _ sinks.Traced = (*Sink)(nil)

// TraceDestination is the Kafka topic m is produced to.
func (s *Sink) TraceDestination(m *sinks.Message) string { return s.cfg.TopicPrefix + m.Topic }

// TraceAttributes are messaging.system kafka and the first seed broker.
func (s *Sink) TraceAttributes() []attribute.KeyValue { return s.traceAttrs }

func traceAttributes(brokers []string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.MessagingSystemKafka}
	if len(brokers) > 0 {
		attrs = append(attrs, sinks.ServerAttributes(brokers[0], 9092)...)
	}
	return attrs
}
