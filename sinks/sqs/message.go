package sqs

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsids"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsmsg"
)

// The message attributes the sink sets on every message, and the values of
// BodyEncodingAttribute (sinks/internal/awsmsg, shared with the SNS sink).
const (
	IdempotencyKeyAttribute = awsmsg.IdempotencyKeyAttribute
	TopicAttribute          = awsmsg.TopicAttribute
	BodyEncodingAttribute   = awsmsg.BodyEncodingAttribute
	HeadersAttribute        = awsmsg.HeadersAttribute
	EncodingBase64          = awsmsg.EncodingBase64
	EncodingEmpty           = awsmsg.EncodingEmpty
	EmptyBody               = awsmsg.EmptyBody
)

// MaxAttributes is the most message attributes SQS takes on one message.
const MaxAttributes = awsmsg.MaxAttributes

// entry is one message ready for SendMessageBatch, and its size as SQS
// counts it against MaximumMessageSize (awsmsg.Message.Size).
type entry struct {
	body  string
	attrs map[string]types.MessageAttributeValue
	group string // MessageGroupId, "" for none
	dedup string // MessageDeduplicationId, "" for none
	size  int
}

// build makes m's entry for queue q, or returns the permanent error of a
// row SQS can never take.
func (s *Sink) build(m *sinks.Message, q *queue) (*entry, error) {
	msg, err := awsmsg.Build(m, "SQS")
	if err != nil {
		return nil, err
	}
	e := &entry{body: msg.Body, attrs: attributes(msg.Attrs), size: msg.Size}
	switch {
	case q.fifo:
		e.group, e.dedup = awsids.FIFO(m.Key, m.IdempotencyKey, s.cfg.FIFODefaultGroup)
	case s.cfg.FairQueues && m.Key != "":
		e.group = awsids.GroupID(m.Key)
	}
	if e.size > q.maxSize {
		return nil, sinks.Permanent(&sinks.LimitError{What: "message (body and attributes)", Size: int64(e.size), Limit: "the queue's MaximumMessageSize", Max: int64(q.maxSize)})
	}
	return e, nil
}

// attributes returns a's string attributes as SQS's.
func attributes(a map[string]string) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, len(a))
	for k, v := range a {
		out[k] = types.MessageAttributeValue{DataType: aws.String(awsmsg.StringType), StringValue: aws.String(v)}
	}
	return out
}
