package pubsub

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-relay/outbox-relay/sinks"
)

var _ sinks.Traced = (*Sink)(nil)

// TraceDestination is the Pub/Sub topic ID m is published to.
func (s *Sink) TraceDestination(m *sinks.Message) string { return s.topicID(m) }

// TraceAttributes are messaging.system gcp_pubsub and the endpoint.
func (s *Sink) TraceAttributes() []attribute.KeyValue { return s.traceAttrs }

func traceAttributes(cfg Config) []attribute.KeyValue {
	endpoint := "pubsub.googleapis.com:443"
	switch {
	case cfg.EmulatorHost != "":
		endpoint = cfg.EmulatorHost
	case cfg.Endpoint != "":
		endpoint = cfg.Endpoint
	}
	return append([]attribute.KeyValue{semconv.MessagingSystemGCPPubSub}, sinks.ServerAttributes(endpoint, 443)...)
}
