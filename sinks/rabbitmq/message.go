package rabbitmq

import (
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// maxShortstr is the longest AMQP short string in bytes: routing keys,
// exchange names, message_id, content_type, type and header names are
// short strings.
const maxShortstr = 255

// reservedHeaders are the headers RabbitMQ or its common plugins act on,
// lower-cased: sender-selected distribution (CC, BCC route a message to
// more queues), dead-lettering history (the broker reads x-death to detect
// cycles), delays, federation and shovel loop detection, stream filters,
// deduplication. A row cannot set them; they are dropped, whatever their
// case.
var reservedHeaders = map[string]bool{
	"cc":                     true,
	"bcc":                    true,
	"x-death":                true,
	"x-first-death-exchange": true,
	"x-first-death-queue":    true,
	"x-first-death-reason":   true,
	"x-last-death-exchange":  true,
	"x-last-death-queue":     true,
	"x-last-death-reason":    true,
	"x-delay":                true,
	"x-delivery-count":       true,
	"x-received-from":        true,
	"x-stream-filter-value":  true,
	"x-deduplication-header": true,
}

// contentTypeHeader is the row header that becomes the content_type
// property.
const contentTypeHeader = "content-type"

// prepare builds the publishing for m, refusing, as permanent failures,
// what the broker can never take.
func (s *Sink) prepare(m *sinks.Message) (*publish, error) {
	if len(m.Topic) > maxShortstr {
		return nil, sinks.Permanent(fmt.Errorf("topic of %d bytes cannot be an AMQP routing key (at most %d bytes)", len(m.Topic), maxShortstr))
	}
	if len(m.IdempotencyKey) > maxShortstr {
		return nil, sinks.Permanent(fmt.Errorf("idempotency key of %d bytes cannot be an AMQP message_id (at most %d bytes)", len(m.IdempotencyKey), maxShortstr))
	}
	if limit := s.maxMessageSize.Load(); limit > 0 && int64(len(m.Payload)) > limit {
		return nil, sinks.Permanent(&TooLargeError{Size: len(m.Payload), Max: limit})
	}
	var headers amqp.Table
	contentType := ""
	for k, v := range m.Headers {
		lower := strings.ToLower(k)
		switch {
		case lower == contentTypeHeader:
			// Several spellings: the lower-case one wins.
			if contentType == "" || k == contentTypeHeader {
				contentType = v
			}
			continue
		case reservedHeaders[lower]:
			continue
		case len(k) > maxShortstr:
			return nil, sinks.Permanent(fmt.Errorf("header name of %d bytes cannot be an AMQP header name (at most %d bytes)", len(k), maxShortstr))
		}
		if headers == nil {
			headers = make(amqp.Table, len(m.Headers))
		}
		headers[k] = v
	}
	if len(contentType) > maxShortstr {
		return nil, sinks.Permanent(fmt.Errorf("content-type header of %d bytes cannot be an AMQP content_type (at most %d bytes)", len(contentType), maxShortstr))
	}
	return &publish{
		key: m.Topic,
		msg: amqp.Publishing{
			Headers:      headers,
			ContentType:  contentType,
			DeliveryMode: amqp.Persistent,
			MessageId:    m.IdempotencyKey,
			Timestamp:    m.CreatedAt,
			Type:         m.Topic,
			Body:         m.Payload,
		},
		done: make(chan struct{}),
	}, nil
}

// ValidateExchange reports whether name can be published to: 1 to 255
// bytes of letters, digits, hyphen, underscore, period and colon, as AMQP
// 0-9-1 defines exchange names. The default exchange (the empty name) is
// not supported.
func ValidateExchange(name string) error {
	if name == "" {
		return errors.New("invalid RabbitMQ exchange name: empty")
	}
	if len(name) > maxShortstr {
		return fmt.Errorf("invalid RabbitMQ exchange name: %d bytes, at most %d", len(name), maxShortstr)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == ':':
		default:
			return fmt.Errorf("invalid RabbitMQ exchange name %q: only letters, digits, -, _, . and : are allowed", name)
		}
	}
	return nil
}
