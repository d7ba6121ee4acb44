package pubsub

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	ps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Pub/Sub's documented limits on a published message
// (https://cloud.google.com/pubsub/quotas#resource_limits). The emulators
// enforce none of them; the sink checks each before sending, so that a
// row over one is refused alone, as a permanent failure, and never fails
// the publish request it would share with other rows.
const (
	// RequestBytesMax is the largest publish request, 10 MB: a message,
	// encoded, with the topic's name, must fit in it.
	RequestBytesMax = ps.MaxPublishRequestBytes
	// AttributesMax is the most attributes a message may have, the
	// sink's own included.
	AttributesMax = 100
	// AttributeKeyBytesMax bounds an attribute's name.
	AttributeKeyBytesMax = 256
	// AttributeValueBytesMax bounds an attribute's value.
	AttributeValueBytesMax = 1024
	// OrderingKeyBytesMax bounds an ordering key (1 KB).
	OrderingKeyBytesMax = 1024
	// TopicIDBytesMax is the longest topic ID, TopicIDBytesMin the
	// shortest.
	TopicIDBytesMax = 255
	TopicIDBytesMin = 3
)

// The attributes the sink adds to every message. A row's header of the
// same name (in any case) is dropped: they are the relay's.
const (
	// IdempotencyKeyAttribute carries the row's idempotency key, the same
	// on every copy: consumers drop a message whose key they have seen
	// (Pub/Sub's own message ID differs from copy to copy).
	IdempotencyKeyAttribute = "outbox_idempotency_key"
	// TopicAttribute carries the row's topic, without PUBSUB_TOPIC_PREFIX:
	// with PUBSUB_TOPIC every row goes to one Pub/Sub topic, and this
	// tells the events apart (subscriptions may filter on it).
	TopicAttribute = "outbox_topic"
)

// reservedPrefix starts the attribute names and topic IDs Google keeps
// for itself (its client libraries add googclient_ attributes).
const reservedPrefix = "goog"

// ValidateTopicID reports whether Pub/Sub can ever accept id as a topic
// ID: 3 to 255 characters, starting with a letter, of ASCII letters,
// digits and - _ . ~ + %, not starting with goog.
func ValidateTopicID(id string) error {
	switch {
	case len(id) < TopicIDBytesMin:
		return fmt.Errorf("invalid Pub/Sub topic ID %q: shorter than %d characters", clip(id), TopicIDBytesMin)
	case len(id) > TopicIDBytesMax:
		return fmt.Errorf("invalid Pub/Sub topic ID %q: %d characters, more than Pub/Sub's %d", clip(id), len(id), TopicIDBytesMax)
	case !isLetter(id[0]):
		return fmt.Errorf("invalid Pub/Sub topic ID %q: it must start with a letter", clip(id))
	case strings.HasPrefix(strings.ToLower(id), reservedPrefix):
		return fmt.Errorf("invalid Pub/Sub topic ID %q: names starting with goog are Google's", clip(id))
	}
	for i := 0; i < len(id); i++ {
		if !topicChar(id[i]) {
			return fmt.Errorf("invalid Pub/Sub topic ID %q: only ASCII letters, digits and - _ . ~ + %% are allowed", clip(id))
		}
	}
	return nil
}

// ValidateTopicPrefix reports whether prefix can start topic IDs: empty,
// or legal topic characters starting with a letter, not starting with
// goog, leaving room for a topic.
func ValidateTopicPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	switch {
	case len(prefix) > TopicIDBytesMax-1:
		return fmt.Errorf("a topic prefix of %d characters leaves no room for a topic (Pub/Sub's limit is %d)", len(prefix), TopicIDBytesMax)
	case !isLetter(prefix[0]):
		return errors.New("a topic ID must start with a letter")
	case strings.HasPrefix(strings.ToLower(prefix), reservedPrefix):
		return errors.New("topic IDs starting with goog are Google's")
	}
	for i := 0; i < len(prefix); i++ {
		if !topicChar(prefix[i]) {
			return errors.New("only ASCII letters, digits and - _ . ~ + % are allowed")
		}
	}
	return nil
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func topicChar(c byte) bool {
	return isLetter(c) || '0' <= c && c <= '9' || strings.IndexByte("-_.~+%", c) >= 0
}

// topicID returns the Pub/Sub topic ID of m: Topic when it is set, else
// TopicPrefix followed by the row's topic.
func (s *Sink) topicID(m *sinks.Message) string {
	if s.cfg.Topic != "" {
		return s.cfg.Topic
	}
	return s.cfg.TopicPrefix + m.Topic
}

// message builds the Pub/Sub message for m, published to topic (its full
// name), refusing as permanent what Pub/Sub can never take.
func (s *Sink) message(m *sinks.Message, topic string) (*ps.Message, error) {
	if err := sinks.CheckMessage(m); err != nil {
		return nil, err
	}
	if s.cfg.Topic == "" {
		if err := ValidateTopicID(s.cfg.TopicPrefix + m.Topic); err != nil {
			return nil, sinks.Permanent(err)
		}
	}
	if len(m.Key) > OrderingKeyBytesMax {
		return nil, sinks.Permanent(&sinks.LimitError{What: "key", Size: int64(len(m.Key)), Limit: "Pub/Sub's limit on an ordering key", Max: OrderingKeyBytesMax})
	}
	if !utf8.ValidString(m.Key) {
		return nil, sinks.Permanent(errors.New("the key is not valid UTF-8, which a Pub/Sub ordering key must be"))
	}
	attrs, err := attributes(m)
	if err != nil {
		return nil, sinks.Permanent(err)
	}
	msg := &ps.Message{Data: m.Payload, Attributes: attrs, OrderingKey: m.Key}
	// The request holds the topic's name and the message, each with its
	// field's tag and length: allow 16 bytes for those.
	size := proto.Size(&pubsubpb.PubsubMessage{Data: msg.Data, Attributes: attrs, OrderingKey: msg.OrderingKey})
	if max := RequestBytesMax - len(topic) - 16; size > max {
		return nil, sinks.Permanent(&sinks.LimitError{What: "message", Size: int64(size), Limit: "Pub/Sub's 10 MB publish request, less the topic's name", Max: int64(max)})
	}
	return msg, nil
}

// attributes returns m's headers as attributes, with the sink's own, or
// why Pub/Sub can never take them.
func attributes(m *sinks.Message) (map[string]string, error) {
	attrs := make(map[string]string, len(m.Headers)+2)
	for _, k := range sortedKeys(m.Headers) {
		if strings.EqualFold(k, IdempotencyKeyAttribute) || strings.EqualFold(k, TopicAttribute) {
			continue // the relay's, not the row's
		}
		v := m.Headers[k]
		switch {
		case strings.HasPrefix(strings.ToLower(k), reservedPrefix):
			return nil, fmt.Errorf("header %s cannot be a Pub/Sub attribute: names starting with goog are Google's", clip(k))
		case len(k) > AttributeKeyBytesMax:
			return nil, &sinks.LimitError{What: "header name", Size: int64(len(k)), Limit: "Pub/Sub's limit on an attribute name", Max: AttributeKeyBytesMax}
		case len(v) > AttributeValueBytesMax:
			return nil, &sinks.LimitError{What: "header " + clip(k), Size: int64(len(v)), Limit: "Pub/Sub's limit on an attribute value", Max: AttributeValueBytesMax}
		case !utf8.ValidString(v):
			return nil, fmt.Errorf("header %s is not valid UTF-8, which a Pub/Sub attribute must be", clip(k))
		}
		attrs[k] = v
	}
	if len(attrs)+2 > AttributesMax {
		return nil, fmt.Errorf("%d headers and the relay's 2 attributes are more than Pub/Sub's %d attributes per message", len(attrs), AttributesMax)
	}
	if len(m.Topic) > AttributeValueBytesMax || !utf8.ValidString(m.Topic) {
		return nil, errors.New("the topic cannot be a Pub/Sub attribute value (more than 1024 bytes, or invalid UTF-8)")
	}
	attrs[IdempotencyKeyAttribute] = m.IdempotencyKey
	attrs[TopicAttribute] = m.Topic
	return attrs, nil
}

func sortedKeys(h map[string]string) []string { return slices.Sorted(maps.Keys(h)) }

// clip returns s, or its first 64 bytes and a mark, for an error message.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return strings.ToValidUTF8(s[:64], "") + "…"
}
