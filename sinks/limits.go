package sinks

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// HeaderBytesMax is the relay's header budget: the most bytes a row's
// headers may take, counting each name and value (the headers the relay
// adds itself, such as the idempotency key, are not counted). Every sink
// refuses a row over it, as a permanent failure, before sending anything.
//
// 16 KiB is Node.js's default limit on a request's headers, the tightest of
// the common webhook receivers (nginx allows 8 KiB per line and 32 KiB in
// all, Go's net/http 1 MiB), and a small part of what every broker takes
// in one message (RabbitMQ's 128 KiB frame holds the headers, NATS's
// max_payload of 1 MiB holds headers and payload). Trace context and
// content types take well under a kilobyte.
const HeaderBytesMax = 16 << 10

// HeaderBytes returns the size of headers as HeaderBytesMax counts it: the
// bytes of every name and value.
func HeaderBytes(headers map[string]string) int {
	n := 0
	for k, v := range headers {
		n += len(k) + len(v)
	}
	return n
}

// CheckHeaderBudget returns a permanent *LimitError when m's headers are
// larger than HeaderBytesMax, else nil.
func CheckHeaderBudget(m *Message) error {
	if n := HeaderBytes(m.Headers); n > HeaderBytesMax {
		return Permanent(&LimitError{What: "headers", Size: int64(n), Limit: "the relay's header budget", Max: HeaderBytesMax})
	}
	return nil
}

// LimitError is a message larger than a limit of its destination, or of the
// relay, that it can never fit in: sinks return it wrapped with Permanent,
// before sending the message.
type LimitError struct {
	// What is the part of the message that is too large: "payload",
	// "headers", "record", "AMQP content header".
	What string
	// Size is its size and Max the limit, in bytes.
	Size, Max int64
	// Limit names the limit: the setting or the destination's property,
	// like "WEBHOOK_MAX_BODY_BYTES" or "the NATS server's max_payload".
	Limit string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s of %d bytes exceeds %s of %d bytes", e.What, e.Size, e.Limit, e.Max)
}

// CheckMessage returns a permanent error when m holds what no sink can
// carry, whatever the destination: headers over HeaderBytesMax, a header
// name that is not an HTTP token (RFC 9110), a header value with a line
// break or a NUL, an idempotency key that is empty, longer than
// outbox.IdempotencyKeyBytesMax, holds a control character or starts or
// ends with a space (it travels as a header everywhere, and NATS and HTTP
// trim a header value: JetStream would take "k " for a duplicate of "k",
// and a webhook receiver would check the signature of another id). The
// table refuses all of these at insert but the outer spaces; a row written
// before that guard, or with triggers off, may still hold them, and must
// be dead-lettered, not retried. Every sink calls it before sending, then
// checks its destination's own limits.
func CheckMessage(m *Message) error {
	if err := CheckHeaderBudget(m); err != nil {
		return err
	}
	for k, v := range m.Headers {
		if !ValidHeaderName(k) {
			return Permanent(fmt.Errorf("header name %q is not an HTTP token (letters, digits and !#$%%&'*+-.^_`|~)", clipped(k)))
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return Permanent(fmt.Errorf("header %s has a line break or a NUL in its value", clipped(k)))
		}
	}
	switch key := m.IdempotencyKey; {
	case key == "":
		return Permanent(errors.New("the idempotency key is empty"))
	case len(key) > outbox.IdempotencyKeyBytesMax:
		return Permanent(&LimitError{What: "idempotency key", Size: int64(len(key)), Limit: "the relay's limit on an idempotency key", Max: outbox.IdempotencyKeyBytesMax})
	case !utf8.ValidString(key) || strings.ContainsFunc(key, unicode.IsControl):
		return Permanent(errors.New("the idempotency key holds a control character or invalid UTF-8 (it travels as a header)"))
	case key[0] == ' ' || key[len(key)-1] == ' ':
		return Permanent(errors.New("the idempotency key starts or ends with a space, which a header value loses"))
	}
	return nil
}

// ValidHeaderName reports whether s is an HTTP token: one or more of the
// characters RFC 9110 allows in a header name.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// clipped returns s, or its first 64 bytes and a mark, for an error
// message.
func clipped(s string) string {
	if len(s) <= 64 {
		return s
	}
	return strings.ToValidUTF8(s[:64], "") + "…"
}
