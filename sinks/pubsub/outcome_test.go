package pubsub_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outbox-relay/outbox-relay/internal/testkit/pubsubtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	pubsubsink "github.com/outbox-relay/outbox-relay/sinks/pubsub"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// A publish of an ordering key that fails pauses the key in the client:
// the key's later messages of the batch are not sent (they would overtake
// the failed one), and once the failed one has its outcome the key is
// resumed, so that the retried rows go, in order.
func TestSink_FailedKeyIsResumedInOrder(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	var failed atomic.Bool
	srv.FailPublish(func(req *pubsubpb.PublishRequest) error {
		// The first request of key k fails with a code the client does
		// not retry.
		if req.Messages[0].GetOrderingKey() == "k" && failed.CompareAndSwap(false, true) {
			return status.Error(codes.PermissionDenied, "injected")
		}
		return nil
	})
	msgs := sinktest.Messages(t, 4)
	for i := range 3 {
		msgs[i].Key = "k"
	}
	errs := deliver(t, s, msgs)
	if errs[0] == nil || sinks.IsPermanent(errs[0]) {
		t.Fatalf("the failed message: %v, want a transient failure", errs[0])
	}
	for _, i := range []int{1, 2} {
		if errs[i] == nil || sinks.IsPermanent(errs[i]) {
			t.Errorf("message %d of the paused key: %v, want not attempted or transient", i, errs[i])
		}
	}
	if errs[3] != nil {
		t.Errorf("the unkeyed message: %v", errs[3])
	}
	// The relay retries the key's rows, the failed one first.
	for i, err := range deliver(t, s, msgs[:3]) {
		if err != nil {
			t.Fatalf("message %d after the key was resumed: %v", i, err)
		}
	}
	byKey(t, srv, topic, msgs)
	var order []string
	for _, m := range srv.Messages(topic) {
		if m.OrderingKey == "k" {
			order = append(order, m.Attributes[pubsubsink.IdempotencyKeyAttribute])
		}
	}
	want := []string{msgs[0].IdempotencyKey, msgs[1].IdempotencyKey, msgs[2].IdempotencyKey}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("key k arrived as %v, want %v", order, want)
	}
}

// The paused key's messages of the batch that the client never sent are
// reported not attempted: the relay puts them back without an attempt.
func TestSink_PausedKeyIsNotAttempted(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	var n atomic.Int32
	srv.FailPublish(func(req *pubsubpb.PublishRequest) error {
		if req.Messages[0].GetOrderingKey() == "k" && n.Add(1) == 1 {
			return status.Error(codes.FailedPrecondition, "injected")
		}
		return nil
	})
	// The key's second message is sent after the first failed: it is held
	// back by the pause (or failed with it, in one request), never stored.
	msgs := sinktest.Messages(t, 2)
	msgs[0].Key, msgs[1].Key = "k", "k"
	errs := deliver(t, s, msgs)
	if errs[0] == nil {
		t.Fatal("the failed message was reported delivered")
	}
	if errs[1] != nil && !errors.Is(errs[1], sinks.ErrNotAttempted) && !strings.Contains(errs[1].Error(), "injected") {
		t.Errorf("the held-back message: %v", errs[1])
	}
	for _, m := range srv.Messages(topic) {
		t.Errorf("a message of the failed key was stored: %s", m.Attributes[pubsubsink.IdempotencyKeyAttribute])
	}
}

// A request refused as invalid fails every message it holds; the sink
// sends each alone, so that only the one at fault is dead-lettered.
func TestSink_InvalidMessageIsRefusedAlone(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	srv.FailPublish(func(req *pubsubpb.PublishRequest) error {
		for _, m := range req.Messages {
			if m.Attributes["x-poison"] != "" {
				return status.Error(codes.InvalidArgument, "Invalid data in message: Message failed schema validation")
			}
		}
		return nil
	})
	msgs := sinktest.Messages(t, 5)
	msgs[2].Headers = map[string]string{"x-poison": "1"}
	errs := deliver(t, s, msgs)
	for i, err := range errs {
		switch {
		case i == 2 && !sinks.IsPermanent(err):
			t.Errorf("the invalid message: %v, want permanent", err)
		case i != 2 && err != nil:
			t.Errorf("message %d beside the invalid one: %v", i, err)
		}
	}
	got := byKey(t, srv, topic, append(msgs[:2:2], msgs[3:]...))
	if len(got[msgs[2].IdempotencyKey]) != 0 {
		t.Error("the invalid message was stored")
	}
}

// Rows name their topics: a topic that does not exist is the row's
// fault, dead-lettered; the sink goes on.
func TestSink_MissingTopicIsPermanent(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	msgs := sinktest.Messages(t, 2)
	msgs[0].Topic = "nobody.made.this"
	errs := deliver(t, s, msgs)
	if !sinks.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "does not exist") {
		t.Errorf("missing topic: %v, want a permanent failure that says so", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("message to an existing topic: %v", errs[1])
	}
	if err := s.Available(); err != nil {
		t.Errorf("a missing topic made the sink unavailable: %v", err)
	}
}

// With PUBSUB_TOPIC, a missing topic is a setup problem: rows wait, and
// the sink says why.
func TestSink_MissingOneTopicMakesItUnavailable(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	s := openSink(t, srv, func(c *pubsubsink.Config) { c.Topic = "not-yet" })
	waitfor.Condition(t, 15*time.Second, "the sink to report the missing topic", func() bool {
		err := s.Available()
		return err != nil && strings.Contains(err.Error(), "does not exist")
	})
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("Available: %v, want it to wrap ErrNotAttempted", err)
	}
	problems, err := s.CheckStartup(t.Context())
	if err != nil || len(problems) != 1 || problems[0].Code != pubsubsink.ProblemNoTopic {
		t.Errorf("start-up check: %v, %v; want %s", problems, err, pubsubsink.ProblemNoTopic)
	}
	srv.CreateTopic(t, "not-yet")
	waitfor.Condition(t, 15*time.Second, "the sink to find the topic", func() bool { return s.Available() == nil })
	if err := deliver(t, s, sinktest.Messages(t, 1))[0]; err != nil {
		t.Fatal(err)
	}
}

// ResourceExhausted pauses the sink and asks for a delay; the pause ends.
func TestSink_ThrottledPauses(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	srv.FailPublish(func(*pubsubpb.PublishRequest) error {
		return status.Error(codes.ResourceExhausted, "quota exceeded")
	})
	err := deliver(t, s, sinktest.Messages(t, 1))[0]
	if d, ok := sinks.RetryDelay(err); !ok || d <= 0 || sinks.IsPermanent(err) {
		t.Fatalf("throttled publish: %v, want a transient failure with a delay", err)
	}
	if err := s.Available(); err == nil || !strings.Contains(err.Error(), "throttles") {
		t.Errorf("Available while throttled: %v", err)
	}
	srv.FailPublish(nil)
	waitfor.Condition(t, 15*time.Second, "the pause to end", func() bool { return s.Available() == nil })
	if err := deliver(t, s, sinktest.Messages(t, 1))[0]; err != nil {
		t.Fatal(err)
	}
}

// A stopped fake makes the sink unavailable, with the reason; restarted,
// it delivers again.
func TestSink_Outage(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	srv.Stop()
	waitfor.Condition(t, 15*time.Second, "the sink to notice the outage", func() bool {
		err := s.Available()
		return err != nil && strings.Contains(err.Error(), "does not answer")
	})
	for _, err := range deliver(t, s, sinktest.Messages(t, 2)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("delivery during the outage: %v, want not attempted", err)
		}
	}
	srv.Restart()
	waitfor.Condition(t, 20*time.Second, "the sink to reconnect", func() bool { return s.Available() == nil })
	msgs := sinktest.Messages(t, 2)
	for _, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	byKey(t, srv, topic, msgs)
}

// Pub/Sub's documented limits, which the fake enforces (pubsubtest.Limits)
// since pstest does not: the sink sends what is at a limit and refuses,
// alone and as permanent, what is one over.
func TestSink_DocumentedLimits(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	many := func(n int) map[string]string {
		h := map[string]string{}
		for i := range n {
			h[fmt.Sprintf("h%d", i)] = "v"
		}
		return h
	}
	cases := []struct {
		name string
		set  func(m *sinks.Message)
		ok   bool
	}{
		{"98 headers and the relay's 2 attributes", func(m *sinks.Message) { m.Headers = many(98) }, true},
		{"99 headers", func(m *sinks.Message) { m.Headers = many(99) }, false},
		{"attribute name of 256 bytes", func(m *sinks.Message) { m.Headers = map[string]string{strings.Repeat("n", 256): "v"} }, true},
		{"attribute name of 257 bytes", func(m *sinks.Message) { m.Headers = map[string]string{strings.Repeat("n", 257): "v"} }, false},
		{"attribute value of 1024 bytes", func(m *sinks.Message) { m.Headers = map[string]string{"v": strings.Repeat("v", 1024)} }, true},
		{"attribute value of 1025 bytes", func(m *sinks.Message) { m.Headers = map[string]string{"v": strings.Repeat("v", 1025)} }, false},
		{"attribute name starting with goog", func(m *sinks.Message) { m.Headers = map[string]string{"Goog-Thing": "v"} }, false},
		{"ordering key of 1024 bytes", func(m *sinks.Message) { m.Key = strings.Repeat("k", 1024) }, true},
		{"ordering key of 1025 bytes", func(m *sinks.Message) { m.Key = strings.Repeat("k", 1025) }, false},
		{"payload of 9.9 MB", func(m *sinks.Message) { m.Payload = make([]byte, 9_900_000) }, true},
		{"payload of 10 MB", func(m *sinks.Message) { m.Payload = make([]byte, 10_000_000) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msgs := sinktest.Messages(t, 3)
			tc.set(&msgs[1])
			errs := deliver(t, s, msgs)
			if errs[0] != nil || errs[2] != nil {
				t.Errorf("the ordinary messages beside it: %v, %v", errs[0], errs[2])
			}
			switch {
			case tc.ok && errs[1] != nil:
				t.Errorf("refused: %v", errs[1])
			case !tc.ok && !sinks.IsPermanent(errs[1]):
				t.Errorf("outcome %v, want a permanent refusal", errs[1])
			}
		})
	}
}

func TestValidateCredentials(t *testing.T) {
	for _, tc := range []struct {
		json string
		ok   bool
	}{
		{`{"type":"service_account","client_email":"relay@p.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\n"}`, true},
		{`{"type":"external_account","audience":"x"}`, false},
		{`{"type":"service_account"}`, false},
		{`not json`, false},
	} {
		if err := pubsubsink.ValidateCredentials([]byte(tc.json)); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.json, err)
		}
	}
}

func TestValidateTopicID(t *testing.T) {
	for id, ok := range map[string]bool{
		"orders": true, "a.b-c_d~e+f%g": true, "ab": false, "1orders": false, "goog-x": false,
		"GOOGx": false, "a/b": false, strings.Repeat("a", 255): true, strings.Repeat("a", 256): false,
	} {
		if err := pubsubsink.ValidateTopicID(id); (err == nil) != ok {
			t.Errorf("%.20s: %v", id, err)
		}
	}
}

// Rows may name any number of topics: the sink keeps a publisher per
// topic only while it is used.
func TestSink_ManyTopicsDoNotPile(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, topic)
	s := newSink(t, srv, nil)
	msgs := sinktest.Messages(t, 300)
	for i := range msgs {
		msgs[i].Topic = fmt.Sprintf("missing.%d", i)
	}
	for i, err := range deliver(t, s, msgs) {
		if !sinks.IsPermanent(err) {
			t.Fatalf("message %d to a missing topic: %v", i, err)
		}
	}
	waitfor.Condition(t, 15*time.Second, "idle publishers to be stopped", func() bool { return pubsubsink.Publishers(s) <= 256 })
}
