package outbox

import "time"

// Message is one event as an application writes it to the outbox.
type Message struct {
	// Topic routes the message: the NATS subject (after NATS_SUBJECT_PREFIX)
	// or the webhook event type. Required.
	Topic string
	// Payload is delivered byte for byte. A nil payload is stored as empty.
	Payload []byte
	// Key is the ordering key (an aggregate id); empty means none.
	Key string
	// Headers are carried as NATS or HTTP headers, for example traceparent or
	// content-type. Names must be HTTP tokens and values must not contain
	// line breaks; the table refuses anything else.
	Headers map[string]string
	// IdempotencyKey identifies the logical event on every delivery
	// (Nats-Msg-Id, webhook-id, Idempotency-Key). Empty means generate one.
	IdempotencyKey string
	// Destination names the configured sink; empty means the default sink.
	Destination string
	// AvailableAt delays delivery until then; zero means now.
	AvailableAt time.Time
}
