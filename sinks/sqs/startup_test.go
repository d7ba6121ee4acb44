package sqs_test

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
	sqssink "github.com/outbox-relay/outbox-relay/sinks/sqs"
)

// TestSink_QueuePerTopic sends each row to the queue its topic names
// under the prefix; a row whose queue does not exist, or whose topic names
// no queue SQS takes, fails permanently, alone.
func TestSink_QueuePerTopic(t *testing.T) {
	t.Parallel()
	srv := sqstest.Start(t)
	created := srv.CreateQueue(t, "events-orders-created", nil)
	fifo := srv.CreateQueue(t, "events-orders.fifo", nil)
	s := newSink(t, srv, srv.AccountURL(), func(c *sqssink.Config) { c.QueuePrefix = "events-" })
	msgs := sinktest.Messages(t, 4)
	msgs[0].Topic = "orders.created"
	msgs[1].Topic = "orders.fifo"
	msgs[2].Topic = "orders.missing"
	msgs[3].Topic = "orders/bad"
	errs := deliver(t, s, msgs)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("rows for existing queues: %v, %v", errs[0], errs[1])
	}
	if !sinks.IsPermanent(errs[2]) || !strings.Contains(errs[2].Error(), "events-orders-missing") {
		t.Errorf("row for a missing queue: %v, want permanent, naming the queue", errs[2])
	}
	if !sinks.IsPermanent(errs[3]) {
		t.Errorf("row whose topic names no queue: %v, want permanent", errs[3])
	}
	waitfor.Condition(t, 10*time.Second, "both messages", func() bool {
		return len(srv.Received(t, created)) == 1 && len(srv.Received(t, fifo)) == 1
	})
	if g := srv.Received(t, fifo)[0].Attributes["MessageGroupId"]; g != msgs[1].IdempotencyKey {
		t.Errorf("an unkeyed row's group on a FIFO queue is %q, want its idempotency key", g)
	}
	problems, err := s.CheckStartup(context.Background())
	if err != nil || len(problems) != 0 {
		t.Errorf("start-up check: %v, %v; want no problem", problems, err)
	}
}

// TestSink_StartupProblems: a fixed queue that does not exist leaves the
// sink unavailable, saying so, and reported as no_queue; a prefix no
// queue starts with is no_queues.
func TestSink_StartupProblems(t *testing.T) {
	t.Parallel()
	srv := sqstest.Start(t)
	missing, err := sqssink.New(sqssink.Config{QueueURL: srv.AccountURL() + "missing", Region: sqstest.Region, Endpoint: srv.Endpoint(), Credentials: sqstest.Credentials, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = missing.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	problems, err := missing.CheckStartup(ctx)
	if err != nil || len(problems) != 1 || problems[0].Code != sqssink.ProblemNoQueue {
		t.Errorf("missing queue: %v, %v; want %s", problems, err, sqssink.ProblemNoQueue)
	}
	if err := missing.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Available with the queue missing: %v", err)
	}

	prefixed := newSink(t, srv, srv.AccountURL(), func(c *sqssink.Config) { c.QueuePrefix = "nothing-" })
	problems, err = prefixed.CheckStartup(ctx)
	if err != nil || !slices.ContainsFunc(problems, func(p sinks.Problem) bool { return p.Code == sqssink.ProblemNoQueues }) {
		t.Errorf("empty prefix: %v, %v; want %s", problems, err, sqssink.ProblemNoQueues)
	}
}

// TestSink_OutageThenBack: while the emulator is down the sink says so
// and delivers nothing; once it is back, it delivers again.
func TestSink_OutageThenBack(t *testing.T) {
	t.Parallel()
	srv := sqstest.Start(t)
	u := srv.CreateQueue(t, "outage", nil)
	s := newSink(t, srv, u, nil)
	srv.Stop()
	waitfor.Condition(t, 10*time.Second, "the sink to see the outage", func() bool { return s.Available() != nil })
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "SQS does not answer") {
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
