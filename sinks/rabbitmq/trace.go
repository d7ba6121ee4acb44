package rabbitmq

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-relay/outbox-relay/sinks"
)

var _ sinks.Traced = (*Sink)(nil)

// TraceDestination is exchange:routing key, as the semantic conventions
// name a RabbitMQ destination: the exchange and the row's topic.
func (s *Sink) TraceDestination(m *sinks.Message) string { return s.cfg.Exchange + ":" + m.Topic }

// TraceAttributes are messaging.system rabbitmq and the broker of the URL
// (without credentials).
func (s *Sink) TraceAttributes() []attribute.KeyValue { return s.traceAttrs }

func traceAttributes(url string) []attribute.KeyValue {
	return append([]attribute.KeyValue{semconv.MessagingSystemRabbitMQ},
		sinks.URLServerAttributes(url, map[string]int{"amqp": 5672, "amqps": 5671})...)
}
