package sns_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	snssink "github.com/outbox-relay/outbox-relay/sinks/sns"
)

// TestSink_TopicPerRow publishes each row to the topic its topic names
// under the prefix; a row whose topic does not exist, or whose topic names
// no topic SNS takes, fails permanently, alone.
func TestSink_TopicPerRow(t *testing.T) {
	t.Parallel()
	srv := sqstest.Start(t)
	_, created := srv.CreateTopic(t, "events-orders-created")
	_, fifo := srv.CreateTopic(t, "events-orders.fifo")
	s := newSink(t, srv, sqstest.TopicARNPrefix, func(c *snssink.Config) { c.TopicPrefix = "events-" })
	msgs := sinktest.Messages(t, 4)
	msgs[0].Topic = "orders.created"
	msgs[1].Topic = "orders.fifo"
	msgs[2].Topic = "orders.missing"
	msgs[3].Topic = "orders/bad"
	errs := deliver(t, s, msgs)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("rows for existing topics: %v, %v", errs[0], errs[1])
	}
	if !sinks.IsPermanent(errs[2]) || !strings.Contains(errs[2].Error(), "events-orders-missing") {
		t.Errorf("row for a missing topic: %v, want permanent, naming the topic", errs[2])
	}
	if !sinks.IsPermanent(errs[3]) {
		t.Errorf("row whose topic names no SNS topic: %v, want permanent", errs[3])
	}
	waitfor.Condition(t, 10*time.Second, "both messages", func() bool {
		return len(srv.Received(t, created)) == 1 && len(srv.Received(t, fifo)) == 1
	})
	if g := srv.Received(t, fifo)[0].Attributes["MessageGroupId"]; g != msgs[1].IdempotencyKey {
		t.Errorf("an unkeyed row's group on a FIFO topic is %q, want its idempotency key", g)
	}
	problems, err := s.CheckStartup(context.Background())
	if err != nil || len(problems) != 0 {
		t.Errorf("start-up check: %v, %v; want no problem", problems, err)
	}
}

// TestSink_FIFODefaultGroup: unkeyed rows on a FIFO topic share
// FIFODefaultGroup, keyed rows have their key.
func TestSink_FIFODefaultGroup(t *testing.T) {
	t.Parallel()
	srv := sqstest.Start(t)
	arn, u := srv.CreateTopic(t, "grouped.fifo")
	s := newSink(t, srv, arn, func(c *snssink.Config) { c.FIFODefaultGroup = "unkeyed" })
	msgs := sinktest.Messages(t, 2)
	msgs[1].Key = "order-7"
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	waitfor.Condition(t, 10*time.Second, "both messages", func() bool { return len(srv.Received(t, u)) == 2 })
	got := srv.Received(t, u)
	if g0, g1 := got[0].Attributes["MessageGroupId"], got[1].Attributes["MessageGroupId"]; g0 != "unkeyed" || g1 != "order-7" {
		t.Errorf("groups %q, %q; want unkeyed, order-7", g0, g1)
	}
	if d := got[0].Attributes["MessageDeduplicationId"]; d != msgs[0].IdempotencyKey {
		t.Errorf("MessageDeduplicationId %q, want the idempotency key %q", d, msgs[0].IdempotencyKey)
	}
}

// TestSink_StartupProblems: a fixed topic that does not exist leaves the
// sink unavailable, saying so, and reported as no_topic; a prefix no
// topic starts with is no_topics.
func TestSink_StartupProblems(t *testing.T) {
	t.Parallel()
	srv := sqstest.Start(t)
	missing, err := snssink.New(snssink.Config{TopicARN: sqstest.TopicARNPrefix + "missing", Endpoint: srv.Endpoint(), Credentials: sqstest.Credentials, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = missing.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	problems, err := missing.CheckStartup(ctx)
	if err != nil || len(problems) != 1 || problems[0].Code != snssink.ProblemNoTopic {
		t.Errorf("missing topic: %v, %v; want %s", problems, err, snssink.ProblemNoTopic)
	}
	if err := missing.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Available with the topic missing: %v", err)
	}

	prefixed := newSink(t, srv, sqstest.TopicARNPrefix, func(c *snssink.Config) { c.TopicPrefix = "nothing-" })
	problems, err = prefixed.CheckStartup(ctx)
	if err != nil || !slices.ContainsFunc(problems, func(p sinks.Problem) bool { return p.Code == snssink.ProblemNoTopics }) {
		t.Errorf("empty prefix: %v, %v; want %s", problems, err, snssink.ProblemNoTopics)
	}
}

// TestSink_OutageThenBack: while the emulator is down the sink says so
// and delivers nothing; once it is back, it delivers again.
func TestSink_OutageThenBack(t *testing.T) {
	t.Parallel()
	srv := sqstest.Start(t)
	arn, _ := srv.CreateTopic(t, "outage")
	s := newSink(t, srv, arn, nil)
	srv.Stop()
	waitfor.Condition(t, 10*time.Second, "the sink to see the outage", func() bool { return s.Available() != nil })
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "SNS does not answer") {
		t.Errorf("Available during the outage: %v", err)
	}
	srv.Start(t)
	waitfor.Condition(t, 10*time.Second, "the sink to be back", func() bool { return s.Available() == nil })
	msgs := sinktest.Messages(t, 3)
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d after the outage: %v", i, err)
		}
	}
}
