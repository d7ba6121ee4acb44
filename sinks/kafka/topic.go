package kafka

import (
	"errors"
	"fmt"
	"strings"
)

// TopicMaxLen is the longest topic name Kafka accepts.
const TopicMaxLen = 249

// internalTopicPrefix starts the names of the ecosystem's internal topics:
// Kafka's own (__consumer_offsets, __transaction_state,
// __cluster_metadata, …), Schema Registry's (_schemas), Confluent's
// (_confluent-metrics, _confluent-command, …) and ksqlDB's
// (_confluent-ksql-<service>_command_topic, …).
const internalTopicPrefix = "_"

// internalTopic returns why topic is one of the ecosystem's internal topics,
// which rows must never reach, or "".
func internalTopic(topic string) string {
	switch {
	case strings.HasPrefix(topic, internalTopicPrefix):
		return "names starting with _ are the internal topics of Kafka (__consumer_offsets, __transaction_state), Schema Registry (_schemas), Confluent and ksqlDB (_confluent*)"
	case strings.HasPrefix(topic, "connect-") && (strings.HasSuffix(topic, "-configs") || strings.HasSuffix(topic, "-offsets") || strings.HasSuffix(topic, "-status")):
		return "connect-…-configs, -offsets and -status are Kafka Connect's internal topics"
	case strings.HasSuffix(topic, ".internal"):
		return "names ending with .internal are MirrorMaker 2's internal topics"
	}
	return ""
}

// ValidateTopic reports whether Kafka can ever accept topic as a topic
// name: 1 to 249 characters among ASCII letters, digits, '.', '_' and '-',
// neither "." nor "..". The ecosystem's internal topics are refused as well
// (see internalTopic): rows must never reach them.
func ValidateTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("invalid Kafka topic: empty")
	case len(topic) > TopicMaxLen:
		return fmt.Errorf("invalid Kafka topic %q…: %d characters, more than Kafka's %d", topic[:32], len(topic), TopicMaxLen)
	case topic == "." || topic == "..":
		return fmt.Errorf("invalid Kafka topic %q", topic)
	}
	if why := internalTopic(topic); why != "" {
		return fmt.Errorf("Kafka topic %q is an internal topic, never written from a row: %s", topic, why)
	}
	for i := 0; i < len(topic); i++ {
		if !topicChar(topic[i]) {
			return fmt.Errorf("invalid Kafka topic %q: only ASCII letters, digits, '.', '_' and '-' are allowed", topic)
		}
	}
	return nil
}

// ValidateTopicPrefix reports whether prefix can start topic names: empty,
// or at most TopicMaxLen-1 legal characters, not starting with "_" (every
// topic would be an internal one).
func ValidateTopicPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > TopicMaxLen-1 {
		return fmt.Errorf("a topic prefix of %d characters leaves no room for a topic (Kafka's limit is %d)", len(prefix), TopicMaxLen)
	}
	if strings.HasPrefix(prefix, internalTopicPrefix) {
		return fmt.Errorf("names starting with %s are the ecosystem's internal topics", internalTopicPrefix)
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
