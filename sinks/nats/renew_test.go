package nats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// A server whose max_control_line is lower than the sink's subject limit
// closes the connection on a long subject, and nats.go gives up on the
// connection for good: the sink makes a new client, sends the batch's
// failed messages again one at a time, refuses the one that closes the
// connection on its own as permanent, and delivers the others.
func TestSink_MakesANewClientAndIsolatesTheMessageThatClosedTheConnection(t *testing.T) {
	modes(t, func(t *testing.T, jetStream bool) {
		srv := natstest.Start(t, func(o *server.Options) { o.MaxControlLine = 256 })
		d := destinationFor(t, srv, jetStream)
		s := newSink(t, srv, jetStream)

		batch := []sinks.Message{
			{Message: outbox.Message{Topic: "before", Payload: []byte("before"), IdempotencyKey: "before-1"}},
			{Message: outbox.Message{Topic: strings.Repeat("x", 300), Payload: []byte("breaks the line"), IdempotencyKey: "long-1"}},
			{Message: outbox.Message{Topic: "after", Payload: []byte("after"), IdempotencyKey: "after-1"}},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errs := s.Deliver(ctx, batch)
		if errs[0] != nil || errs[2] != nil {
			t.Errorf("the messages beside the one that closed the connection failed: %v, %v", errs[0], errs[2])
		}
		if !sinks.IsPermanent(errs[1]) || !strings.Contains(errs[1].Error(), "maximum control line exceeded") {
			t.Errorf("the message that closed the connection: %v, want a permanent failure with the server's reason", errs[1])
		}
		if s.Renewals() != 2 || s.Available() != nil {
			t.Errorf("renewals %d (want 2: after the batch and after the message alone), available %v", s.Renewals(), s.Available())
		}
		// A core NATS subscriber receives after the flush; it may see
		// "before" twice (sent with the batch, and alone again: at least
		// once), JetStream drops the copy by its Nats-Msg-Id.
		got := map[string]string{}
		waitfor.Condition(t, 15*time.Second, "the messages at the destination", func() bool {
			for _, r := range d.Received(t) {
				got[r.Topic] = string(r.Payload)
			}
			return len(got) >= 2
		})
		if len(got) != 2 || got["before"] != "before" || got["after"] != "after" {
			t.Fatalf("the destination holds %v, want the two ordinary messages", got)
		}
		if jetStream && len(d.Received(t)) != 2 {
			t.Errorf("the stream holds %d messages, want each ordinary message once", len(d.Received(t)))
		}
	})
}

// A subject over SubjectBytesMax is refused before it is sent, as
// permanent, and the connection stays up.
func TestSink_RefusesASubjectLongerThanTheLimitWithoutSendingIt(t *testing.T) {
	modes(t, func(t *testing.T, jetStream bool) {
		srv := natstest.Start(t)
		destinationFor(t, srv, jetStream)
		s := newSink(t, srv, jetStream)
		long := sinks.Message{Message: outbox.Message{Topic: strings.Repeat("x", natssink.SubjectBytesMax), Payload: []byte("{}"), IdempotencyKey: "long-2"}}
		errs := s.Deliver(context.Background(), []sinks.Message{long})
		var limit *sinks.LimitError
		if !sinks.IsPermanent(errs[0]) || !errors.As(errs[0], &limit) || limit.What != "subject" || limit.Max != natssink.SubjectBytesMax {
			t.Fatalf("Deliver = %v, want a permanent limit error naming the subject and %d bytes", errs[0], natssink.SubjectBytesMax)
		}
		if s.Renewals() != 0 || s.Available() != nil {
			t.Fatalf("the connection was lost (renewals %d, available %v)", s.Renewals(), s.Available())
		}
	})
}

// destinationFor captures what reaches prefix+">" on srv: a stream in
// JetStream mode, a subscriber in core NATS.
func destinationFor(t testing.TB, srv *natstest.Server, jetStream bool) sinktest.Destination {
	t.Helper()
	if jetStream {
		srv.CreateStream(t, stream, prefix+">")
		return &streamDestination{srv: srv}
	}
	d := &subscriberDestination{srv: srv}
	nc := srv.Connect(t)
	if _, err := nc.Subscribe(prefix+">", d.add); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return d
}
