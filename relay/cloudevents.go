package relay

import (
	"maps"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// addCloudEvents gives m the headers of a CloudEvents 1.0 event in binary
// mode (the same ce- headers for the NATS and HTTP bindings): the payload is
// the event's data, and the attributes travel as headers. Headers the row
// set itself win, so a producer can name its own ce-type or ce-source.
func addCloudEvents(m *sinks.Message, source string) {
	h := make(map[string]string, len(m.Headers)+5)
	h["ce-specversion"] = "1.0"
	h["ce-id"] = m.IdempotencyKey
	h["ce-type"] = m.Topic
	h["ce-source"] = source
	h["ce-time"] = m.CreatedAt.UTC().Format(time.RFC3339Nano)
	maps.Copy(h, m.Headers)
	m.Headers = h
}
