package kafka

import (
	"errors"
	"fmt"
	"strings"
)

// TopicMaxLen is the longest topic name Kafka accepts.
const TopicMaxLen = 249

// internalTopicPrefix starts the names of Kafka's own topics
// (__consumer_offsets, __transaction_state, __cluster_metadata, …).
const internalTopicPrefix = "__"

// ValidateTopic reports whether Kafka can ever accept topic as a topic
// name: 1 to 249 characters among ASCII letters, digits, '.', '_' and '-',
// neither "." nor "..". Names starting with "__" are refused as well: they
// belong to Kafka's internal topics, which rows must never reach.
func ValidateTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("invalid Kafka topic: empty")
	case len(topic) > TopicMaxLen:
		return fmt.Errorf("invalid Kafka topic %q…: %d characters, more than Kafka's %d", topic[:32], len(topic), TopicMaxLen)
	case topic == "." || topic == "..":
		return fmt.Errorf("invalid Kafka topic %q", topic)
	case strings.HasPrefix(topic, internalTopicPrefix):
		return fmt.Errorf("invalid Kafka topic %q: names starting with %s are Kafka's internal topics", topic, internalTopicPrefix)
	}
	for i := 0; i < len(topic); i++ {
		if !topicChar(topic[i]) {
			return fmt.Errorf("invalid Kafka topic %q: only ASCII letters, digits, '.', '_' and '-' are allowed", topic)
		}
	}
	return nil
}

// ValidateTopicPrefix reports whether prefix can start topic names: empty,
// or at most TopicMaxLen-1 legal characters, not starting with "__".
func ValidateTopicPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > TopicMaxLen-1 {
		return fmt.Errorf("a topic prefix of %d characters leaves no room for a topic (Kafka's limit is %d)", len(prefix), TopicMaxLen)
	}
	if strings.HasPrefix(prefix, internalTopicPrefix) {
		return fmt.Errorf("names starting with %s are Kafka's internal topics", internalTopicPrefix)
	}
	for i := 0; i < len(prefix); i++ {
		if !topicChar(prefix[i]) {
			return errors.New("only ASCII letters, digits, '.', '_' and '-' are allowed")
		}
	}
	return nil
}

// topicChar reports whether c may appear in a Kafka topic name.
func topicChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}
