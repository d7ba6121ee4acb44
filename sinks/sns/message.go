package sns

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsids"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsmsg"
)

// The message attributes the sink sets on every message, and the values of
// BodyEncodingAttribute (sinks/internal/awsmsg, shared with the SQS sink).
const (
	IdempotencyKeyAttribute = awsmsg.IdempotencyKeyAttribute
	TopicAttribute          = awsmsg.TopicAttribute
	BodyEncodingAttribute   = awsmsg.BodyEncodingAttribute
	HeadersAttribute        = awsmsg.HeadersAttribute
	EncodingBase64          = awsmsg.EncodingBase64
	EncodingEmpty           = awsmsg.EncodingEmpty
	EmptyBody               = awsmsg.EmptyBody
)

// MaxAttributes is the most message attributes SNS takes on one message.
const MaxAttributes = awsmsg.MaxAttributes

// MaxMessageSize is the most bytes SNS takes in one message, its body and
// its attributes' names, types and values, and in one PublishBatch.
const MaxMessageSize = 256 << 10

// entry is one message ready for PublishBatch, and its size as SNS counts
// it against MaxMessageSize (awsmsg.Message.Size).
type entry struct {
	body  string
	attrs map[string]types.MessageAttributeValue
	group string // MessageGroupId, "" for none
	dedup string // MessageDeduplicationId, "" for none
	size  int
}

// build makes m's entry for a topic (a FIFO topic when fifo), or returns
// the permanent error of a row SNS can never take.
func (s *Sink) build(m *sinks.Message, fifo bool) (*entry, error) {
	msg, err := awsmsg.Build(m, "SNS")
	if err != nil {
		return nil, err
	}
	e := &entry{body: msg.Body, attrs: attributes(msg.Attrs), size: msg.Size}
	if fifo {
		e.group, e.dedup = awsids.FIFO(m.Key, m.IdempotencyKey, s.cfg.FIFODefaultGroup)
	}
	if e.size > MaxMessageSize {
		return nil, sinks.Permanent(&sinks.LimitError{What: "message (body and attributes)", Size: int64(e.size), Limit: "SNS's message size", Max: MaxMessageSize})
	}
	return e, nil
}

// attributes returns a's string attributes as SNS's.
func attributes(a map[string]string) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, len(a))
	for k, v := range a {
		out[k] = types.MessageAttributeValue{DataType: aws.String(awsmsg.StringType), StringValue: aws.String(v)}
	}
	return out
}
