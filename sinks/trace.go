package sinks

import (
	"net"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Traced is implemented by sinks that describe their deliveries to
// tracing. When tracing is on, the relay makes one CLIENT span, named
// "send {sink}" after the configured sink, per batch and destination: it
// groups a batch's messages by TraceDestination, gives each span the
// TraceAttributes, and, for a messaging system, the destination as
// messaging.destination.name (cut to 200 bytes: a destination holds the
// row's topic, so it is never the span's name).
//
// TraceDestination returns the name of where m goes, as the destination
// knows it: the NATS subject, the Kafka topic (prefixes included), the
// RabbitMQ exchange:routing key, the webhook's host and path. It must be
// cheap, and it is called before the message is checked: for a message the
// sink will refuse, any name will do.
//
// TraceAttributes returns the attributes every span of the sink carries,
// per the OpenTelemetry semantic conventions: messaging.system and
// server.address, server.port for a broker; http.request.method, url.full
// (without credentials or query) and server.address, server.port for an
// HTTP endpoint. When they hold messaging.system, the relay adds the
// messaging attributes of the span (messaging.destination.name,
// messaging.operation.*, messaging.batch.message_count). The relay does
// not modify the slice.
type Traced interface {
	TraceDestination(m *Message) string
	TraceAttributes() []attribute.KeyValue
}

// ServerAttributes returns server.address and server.port of hostport
// (host:port, or a bare host, which takes defaultPort), for a sink's
// TraceAttributes.
func ServerAttributes(hostport string, defaultPort int) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, strconv.Itoa(defaultPort)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 {
		n = defaultPort
	}
	return []attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(n)}
}

// URLServerAttributes returns ServerAttributes of the host of raw, a URL,
// with the default port of its scheme in defaultPorts when it names none.
// A URL that cannot be parsed gives none.
func URLServerAttributes(raw string, defaultPorts map[string]int) []attribute.KeyValue {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil
	}
	return ServerAttributes(u.Host, defaultPorts[u.Scheme])
}
