package kafka_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/sinks"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

func TestSink_MissingTopicIsRetriedAndNamed(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, 1)
	s := newSink(t, c, nil)
	msgs := sinktest.Messages(t, 3)
	msgs[1].Topic = "orders.missing"
	start := time.Now()
	errs := deliver(t, s, msgs)
	t.Logf("Deliver took %s: %v", time.Since(start), errs[1])
	switch err := errs[1]; {
	case err == nil:
		t.Fatal("a record for a missing topic was reported delivered")
	case sinks.IsPermanent(err) || errors.Is(err, sinks.ErrNotAttempted):
		t.Errorf("missing topic: %v, want a transient error (the topic may be created)", err)
	case !strings.Contains(err.Error(), prefix+"orders.missing") || !strings.Contains(err.Error(), "does not exist"):
		t.Errorf("missing topic: %q, want an error that says topic %s does not exist", err, prefix+"orders.missing")
	}
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("the messages for the existing topic: %v, %v", errs[0], errs[2])
	}

	// Once the topic exists, the retry goes through.
	c.CreateTopic(t, prefix+"orders.missing", 1)
	if err := deliver(t, s, msgs[1:2])[0]; err != nil {
		t.Errorf("after the topic was created: %v", err)
	}
}

func TestSink_InvalidTopicIsPermanent(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, 1)
	s := newSink(t, c, func(cfg *kafkasink.Config) { cfg.TopicPrefix = "" })
	topics := []string{"orders created", "orders/created", "ordres:créés", "", ".", "..", "__consumer_offsets", strings.Repeat("a", 250), topic}
	msgs := sinktest.Messages(t, len(topics))
	for i := range msgs {
		msgs[i].Topic = topics[i]
	}
	errs := deliver(t, s, msgs)
	for i, tp := range topics {
		if tp == topic {
			if errs[i] != nil {
				t.Errorf("valid topic %q: %v", tp, errs[i])
			}
			continue
		}
		if !sinks.IsPermanent(errs[i]) {
			t.Errorf("topic %q: %v, want a permanent error", tp, errs[i])
		}
	}
}

func TestSink_BrokerRefusingTheTopicIsPermanent(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, 1)
	c.CreateTopic(t, prefix+"refused", 1)
	s := newSink(t, c, nil)
	// A name the sink accepts but the broker refuses (a policy, a
	// reserved name): INVALID_TOPIC_EXCEPTION.
	failTopic(c.Fake(), topicID(t, c, prefix+"refused"), kerr.InvalidTopicException)
	msgs := sinktest.Messages(t, 2)
	msgs[0].Topic = "refused"
	// One at a time, so that no produce request mixes the two topics.
	if err := deliver(t, s, msgs[:1])[0]; !sinks.IsPermanent(err) || !strings.Contains(err.Error(), prefix+"refused") {
		t.Errorf("refused topic: %v, want a permanent error naming it", err)
	}
	if err := deliver(t, s, msgs[1:])[0]; err != nil {
		t.Errorf("the other topic: %v", err)
	}
}

func TestSink_RecordOverTheSizeLimitIsPermanent(t *testing.T) {
	t.Parallel()
	t.Run("the sink's limit", func(t *testing.T) {
		t.Parallel()
		c := kafkatest.Start(t)
		c.CreateTopic(t, topic, 1)
		s := newSink(t, c, func(cfg *kafkasink.Config) { cfg.MaxMessageBytes = 4096 })
		msgs := sinktest.Messages(t, 3)
		msgs[1].Payload = make([]byte, 8192)
		errs := deliver(t, s, msgs)
		if !sinks.IsPermanent(errs[1]) || !strings.Contains(errs[1].Error(), "too large") {
			t.Errorf("record over KAFKA_MAX_MESSAGE_BYTES: %v, want a permanent error saying it is too large", errs[1])
		}
		if errs[0] != nil || errs[2] != nil {
			t.Errorf("the other messages: %v, %v", errs[0], errs[2])
		}
	})
	t.Run("the broker's limit", func(t *testing.T) {
		t.Parallel()
		c := kafkatest.Start(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
		c.CreateTopic(t, topic, 1)
		s := newSink(t, c, nil)
		msgs := sinktest.Messages(t, 1)
		msgs[0].Payload = make([]byte, 8192)
		rand.Read(msgs[0].Payload) // incompressible
		if err := deliver(t, s, msgs)[0]; !sinks.IsPermanent(err) || !errors.Is(err, kerr.MessageTooLarge) {
			t.Errorf("record over the broker's message.max.bytes: %v, want a permanent MESSAGE_TOO_LARGE", err)
		}
		ok := sinktest.Messages(t, 1)
		if err := deliver(t, s, ok)[0]; err != nil {
			t.Errorf("a small record after it: %v", err)
		}
	})
}

func TestSink_LeaderChangeIsRetriedWithinDeliver(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, 3)
	s := newSink(t, c, nil)
	// The first produce request is answered NOT_LEADER_FOR_PARTITION for
	// every partition, as during an election; the leaders move too.
	failProduceOnce(c.Fake(), kerr.NotLeaderForPartition)
	c.Fake().ShufflePartitionLeaders()
	msgs := sinktest.Messages(t, 20)
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	waitRecords(t, c, msgs)
}

func TestSink_UnacknowledgedByTheDeadlineIsTransient(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, 1)
	s := newSink(t, c, nil)
	// Every produce is answered REQUEST_TIMED_OUT: the broker could not
	// replicate in time.
	c.Fake().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake().KeepControl()
		return produceError(req, [16]byte{}, kerr.RequestTimedOut), nil, true
	})
	msgs := sinktest.Messages(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	errs := s.Deliver(ctx, msgs)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Deliver took %s with a 2s deadline", took)
	}
	for i, err := range errs {
		switch {
		case err == nil:
			t.Errorf("message %d reported delivered without an acknowledgement", i)
		case sinks.IsPermanent(err), errors.Is(err, sinks.ErrNotAttempted):
			t.Errorf("message %d: %v, want a transient error", i, err)
		}
	}
}

// failTopic makes c answer every produce to the topic id with err.
func failTopic(c *kfake.Cluster, id [16]byte, err *kerr.Error) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, t := range req.(*kmsg.ProduceRequest).Topics {
			if t.TopicID == id {
				return produceError(req, id, err), nil, true
			}
		}
		return nil, nil, false
	})
}

// topicID returns the id of topic.
func topicID(t *testing.T, c *kafkatest.Cluster, topic string) [16]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := c.Admin(t).ListTopics(ctx, topic)
	if err != nil || topics[topic].Err != nil {
		t.Fatalf("describe %s: %v, %v", topic, err, topics[topic].Err)
	}
	return topics[topic].ID
}

// failProduceOnce makes c answer the next produce request with err.
func failProduceOnce(c *kfake.Cluster, err *kerr.Error) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		return produceError(req, [16]byte{}, err), nil, true
	})
}

// produceError answers req with err for every partition of the topic id,
// or of every topic when id is zero. The request must hold no other topic:
// they would go unanswered.
func produceError(req kmsg.Request, id [16]byte, err *kerr.Error) kmsg.Response {
	preq := req.(*kmsg.ProduceRequest)
	resp := preq.ResponseKind().(*kmsg.ProduceResponse)
	for _, t := range preq.Topics {
		if id != ([16]byte{}) && t.TopicID != id {
			continue
		}
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, err.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
