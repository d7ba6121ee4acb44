package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/sinks"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
)

func checkStartup(t *testing.T, cfg kafkasink.Config) []sinks.Problem {
	t.Helper()
	cfg.Logger = testLogger(t)
	s, err := kafkasink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	problems, err := s.CheckStartup(ctx)
	if err != nil {
		t.Fatalf("CheckStartup: %v", err)
	}
	return problems
}

func codes(problems []sinks.Problem) []string {
	var out []string
	for _, p := range problems {
		out = append(out, p.Code)
	}
	return out
}

func TestCheckStartup_ReportsNoTopicUnderThePrefix(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, "other.orders", 1)
	cfg := kafkasink.Config{Brokers: c.Brokers(), TopicPrefix: "events."}
	if got := codes(checkStartup(t, cfg)); len(got) != 1 || got[0] != kafkasink.ProblemNoTopics {
		t.Errorf("without a topic under the prefix: problems %v, want [%s]", got, kafkasink.ProblemNoTopics)
	}
	c.CreateTopic(t, "events.orders", 1)
	if got := checkStartup(t, cfg); len(got) != 0 {
		t.Errorf("with a topic under the prefix: problems %v, want none", codes(got))
	}
	cfg.TopicPrefix = ""
	if got := checkStartup(t, cfg); len(got) != 0 {
		t.Errorf("without a prefix there is nothing to check, but: %v", codes(got))
	}
}

func TestCheckStartup_ReportsARefusedProducerID(t *testing.T) {
	t.Parallel()
	// The relay's user may describe the topic but write nothing, so the
	// cluster grants it no idempotent producer id.
	describe := kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true}
	c := saslCluster(t, kfake.EnableACLs(), kfake.User(kafkasink.MechanismScramSHA512, "reader", "reader-s3cret", describe))
	cfg := kafkasink.Config{
		Brokers:     c.Brokers(),
		TopicPrefix: prefix,
		SASL:        kafkasink.SASL{Mechanism: kafkasink.MechanismScramSHA512, Username: "reader", Password: "reader-s3cret"},
	}
	if got := codes(checkStartup(t, cfg)); len(got) != 1 || got[0] != kafkasink.ProblemNoProducerID {
		t.Errorf("problems %v, want [%s]", got, kafkasink.ProblemNoProducerID)
	}
	cfg.SASL = kafkasink.SASL{Mechanism: kafkasink.MechanismScramSHA512, Username: relayUser, Password: relayPass}
	if got := checkStartup(t, cfg); len(got) != 0 {
		t.Errorf("a superuser: problems %v, want none", codes(got))
	}
}
