package sinks

import "fmt"

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
