package rabbitmq

import (
	"errors"
	"fmt"
	"strconv"
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

// idempotencyKeyHeader is the header that carries the idempotency key on
// Kafka and HTTP. On AMQP message_id carries it: a row cannot set this
// header, whatever its case, so that no header contradicts message_id.
const idempotencyKeyHeader = "Idempotency-Key"

// prepare builds the publishing for m, to go on connection c, refusing, as
// permanent failures, what the broker can never take: over AMQP's short
// strings, over the header budget, a content header larger than c's frame,
// a payload over the largest message.
func (s *Sink) prepare(m *sinks.Message, c *connection) (*publish, error) {
	if len(m.Topic) > maxShortstr {
		return nil, sinks.Permanent(fmt.Errorf("topic of %d bytes cannot be an AMQP routing key (at most %d bytes)", len(m.Topic), maxShortstr))
	}
	if len(m.IdempotencyKey) > maxShortstr {
		return nil, sinks.Permanent(fmt.Errorf("idempotency key of %d bytes cannot be an AMQP message_id (at most %d bytes)", len(m.IdempotencyKey), maxShortstr))
	}
	if err := sinks.CheckMessage(m); err != nil {
		return nil, err
	}
	if err := s.checkBody(len(m.Payload), c); err != nil {
		return nil, err
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
		case reservedHeaders[lower], strings.EqualFold(k, idempotencyKeyHeader):
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
	p := &publish{
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
	}
	if size := contentHeaderFrameSize(&p.msg); c.frameMax > 0 && size > c.frameMax {
		// The broker would close the whole connection over it (501
		// FRAME_ERROR), failing every message in flight.
		return nil, sinks.Permanent(&sinks.LimitError{What: "AMQP content header (properties and headers)", Size: int64(size),
			Limit: "the frame size RabbitMQ negotiated for the connection (frame_max)", Max: int64(c.frameMax)})
	}
	return p, nil
}

// checkBody refuses a payload of size bytes over the largest message: the
// broker's max_message_size once a refusal has told it, else
// Config.MaxMessageBytes, else the default of c's broker version.
func (s *Sink) checkBody(size int, c *connection) error {
	if learned := s.maxMessageSize.Load(); learned > 0 && int64(size) > learned {
		return sinks.Permanent(&TooLargeError{Size: size, Max: learned})
	}
	limit, name := s.cfg.MaxMessageBytes, "RABBITMQ_MAX_MESSAGE_BYTES"
	if limit == 0 {
		limit, name = c.maxBody, "RabbitMQ's default max_message_size for the broker's version (set RABBITMQ_MAX_MESSAGE_BYTES to the broker's own)"
	}
	if limit > 0 && int64(size) > limit {
		return sinks.Permanent(&sinks.LimitError{What: "payload", Size: int64(size), Limit: name, Max: limit})
	}
	return nil
}

// Sizes of the AMQP 0-9-1 framing around a content header's properties: the
// frame's type, channel and size (7) and its end octet (1), then the class
// id, weight, body size and property flags (2+2+8+2).
const (
	frameOverhead        = 8
	contentHeaderFixed   = 14
	maxMessageSizeBefore = 128 << 20 // RabbitMQ 3.8 to 3.13's default max_message_size
	maxMessageSizeFrom4  = 16 << 20  // RabbitMQ 4's
)

// contentHeaderFrameSize returns the size in bytes of the frame that
// carries p's properties, as amqp091-go encodes them: the fields prepare
// sets, with a headers table of strings.
func contentHeaderFrameSize(p *amqp.Publishing) int {
	n := frameOverhead + contentHeaderFixed
	shortstr := func(s string) int { return 1 + len(s) }
	if p.ContentType != "" {
		n += shortstr(p.ContentType)
	}
	if len(p.Headers) > 0 {
		n += 4 // the table's length
		for k, v := range p.Headers {
			n += shortstr(k) + 1 // name, type octet
			switch v := v.(type) {
			case string:
				n += 4 + len(v)
			default:
				panic(fmt.Sprintf("rabbitmq: header %s of type %T", k, v))
			}
		}
	}
	if p.DeliveryMode != 0 {
		n++
	}
	if p.MessageId != "" {
		n += shortstr(p.MessageId)
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	if p.Type != "" {
		n += shortstr(p.Type)
	}
	return n
}

// defaultMaxMessageSize returns the default max_message_size of the RabbitMQ
// version the broker announced ("3.13.7", "4.0.5"): 16 MiB from 4.0, 128 MiB
// before, and for a version it cannot read.
func defaultMaxMessageSize(version string) int64 {
	major, _, _ := strings.Cut(version, ".")
	if n, err := strconv.Atoi(major); err == nil && n >= 4 {
		return maxMessageSizeFrom4
	}
	return maxMessageSizeBefore
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
