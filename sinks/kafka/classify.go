package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// classify turns the failure of a record's produce into its outcome: the
// refusals no retry can fix are permanent, the others transient, each with
// a text that says what to do about it. topic is the Kafka topic.
func (s *Sink) classify(topic string, err error) error {
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return sinks.Permanent(fmt.Errorf("record for topic %s is too large for Kafka (KAFKA_MAX_MESSAGE_BYTES=%d, or the topic's max.message.bytes): %w",
			topic, s.cfg.MaxMessageBytes, err))
	case errors.Is(err, kerr.InvalidTopicException):
		return sinks.Permanent(fmt.Errorf("Kafka refuses topic %s: %w", topic, err))
	case errors.Is(err, kerr.InvalidRecord):
		// The broker validates each record: a compacted topic refuses a
		// record without a key, and it always will.
		return sinks.Permanent(fmt.Errorf("Kafka refuses the record for topic %s (a compacted topic needs a key): %w", topic, err))
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return fmt.Errorf("Kafka topic %s does not exist: create it (clusters usually disable automatic topic creation), or route the row elsewhere; retrying: %w", topic, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return fmt.Errorf("not authorized to write to Kafka topic %s: grant the relay's user WRITE on it; retrying: %w", topic, err)
	case errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return fmt.Errorf("Kafka refused the relay an idempotent producer id (before Kafka 3.0 this needs IDEMPOTENT_WRITE on the cluster); retrying: %w", err)
	case errors.Is(err, kgo.ErrRecordTimeout):
		return fmt.Errorf("not acknowledged by Kafka within KAFKA_PRODUCE_TIMEOUT=%s: %w", s.cfg.ProduceTimeout, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The client cancels a record only when it was never written.
		return fmt.Errorf("produce to %s cancelled before Kafka acknowledged it: %w", topic, err)
	}
	return fmt.Errorf("produce to %s: %w", topic, err)
}
