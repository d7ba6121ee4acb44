package rabbitmq

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// ErrNacked is the outcome of a message the broker refused with basic.nack
// (a full queue with x-overflow reject-publish, a queue that failed): it is
// retried.
var ErrNacked = errors.New("RabbitMQ refused the message (basic.nack): a queue it routes to is full (x-overflow reject-publish) or unavailable")

// UnroutableError is the outcome of a message the broker returned because
// no queue is bound to the exchange for its routing key (basic.return,
// 312 NO_ROUTE). It is transient: binding a queue makes the retry succeed.
type UnroutableError struct {
	Exchange   string
	RoutingKey string
	// Code and Text are the broker's reply (312, NO_ROUTE).
	Code uint16
	Text string
}

func (e *UnroutableError) Error() string {
	return fmt.Sprintf("RabbitMQ returned the message: no queue is bound to exchange %q for routing key %q (%d %s); bind a queue to receive it, until then it is retried",
		e.Exchange, e.RoutingKey, e.Code, e.Text)
}

// TooLargeError is the outcome of a message whose payload is larger than
// the broker's max_message_size; it is wrapped with sinks.Permanent.
type TooLargeError struct {
	// Size is the payload's size and Max the broker's limit, in bytes.
	Size int
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("payload of %d bytes exceeds RabbitMQ's max_message_size of %d bytes", e.Size, e.Max)
}

// messageSize matches the broker's refusal of a message over
// max_message_size: "PRECONDITION_FAILED - message size 134217729 is larger
// than configured max size 134217728" (without "configured" at the
// built-in limit).
var messageSize = regexp.MustCompile(`message size (\d+) is larger than (?:configured )?max size (\d+)`)

// oversized reads a channel's closing reason: when the broker closed it for
// a message over max_message_size, it remembers the limit (later messages
// over it are refused before publishing) and returns the message it
// refused, the oldest pending one of that size, with its permanent error.
func (s *Sink) oversized(reason *amqp.Error, pending map[uint64]*publish) (*publish, error) {
	if reason == nil || reason.Code != amqp.PreconditionFailed {
		return nil, nil
	}
	m := messageSize.FindStringSubmatch(reason.Reason)
	if m == nil {
		return nil, nil
	}
	size, err1 := strconv.Atoi(m[1])
	limit, err2 := strconv.ParseInt(m[2], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, nil
	}
	s.maxMessageSize.Store(limit)
	s.log.Warn("RabbitMQ refused a message over its max_message_size; larger payloads are dead-lettered from now on", "max_message_size", limit)
	var culprit *publish
	for _, p := range pending {
		if len(p.msg.Body) == size && (culprit == nil || p.tag < culprit.tag) {
			culprit = p
		}
	}
	return culprit, sinks.Permanent(&TooLargeError{Size: size, Max: limit})
}
