package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// relayPermissions are the least NATS permissions that work for the
// relay's user, with events. as NATS_SUBJECT_PREFIX and EVENTS as
// NATS_STREAM: publish on its subjects and the JetStream API calls of the
// start-up check (and of NATS_STREAM's creation), subscribe to its inboxes
// for acknowledgements and API replies. Nothing else.
var relayPermissions = &server.Permissions{
	Publish: &server.SubjectPermission{Allow: []string{
		"events.>",
		"$JS.API.STREAM.NAMES",
		"$JS.API.STREAM.INFO.EVENTS",
		"$JS.API.STREAM.CREATE.EVENTS",
	}},
	Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
}

func TestSink_WorksWithTheDocumentedPermissionsOnly(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "relay", Password: "relay", Permissions: relayPermissions},
		}
	})
	s, err := natssink.New(natssink.Config{
		URL: srv.URLFor("relay", "relay"), JetStream: true, SubjectPrefix: "events.",
		Stream: "EVENTS", DuplicateWindow: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	problems, err := s.CheckStartup(ctx)
	if err != nil || len(problems) != 0 {
		t.Fatalf("start-up check with the documented permissions: problems %v, err %v", problems, err)
	}
	msgs := sinktest.Messages(t, 20)
	for i := range msgs {
		msgs[i].Topic = "orders.created"
	}
	for i, err := range s.Deliver(ctx, msgs) {
		if err != nil {
			t.Fatalf("message %d with the documented permissions: %v", i, err)
		}
	}
	if n := srv.Count(t, "EVENTS"); n != 20 {
		t.Errorf("stream holds %d messages, want 20", n)
	}
}

// TestSink_RefusesControlPlaneSubjects uses no prefix, as the quick start
// does: with one, a topic cannot make a subject start with $ or _INBOX.
func TestSink_RefusesControlPlaneSubjects(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	st := srv.CreateStream(t, "EVENTS", "events.>")
	s, err := natssink.New(natssink.Config{URL: srv.URL(), JetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	msgs := sinktest.Messages(t, 4)
	msgs[0].Topic = "$JS.API.STREAM.DELETE.EVENTS"
	msgs[1].Topic = "$JS.API.STREAM.PURGE.EVENTS"
	msgs[2].Topic = "_INBOX.someone.elses.reply"
	msgs[3].Topic = "$SYS.REQ.SERVER.PING"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, err := range s.Deliver(ctx, msgs) {
		if !sinks.IsPermanent(err) {
			t.Errorf("topic %q: %v, want a permanent refusal", msgs[i].Topic, err)
		}
	}
	if _, err := st.Info(ctx); err != nil {
		t.Errorf("the stream is gone: %v", err)
	}
}
