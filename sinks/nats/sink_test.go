package nats_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

const (
	prefix = "test."
	stream = "SINKTEST"
)

// harnessJetStream makes the sinks the conformance and hostile-row suites run against.
var harnessJetStream = sinktest.Harness{
	New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
		srv := natstest.Start(t)
		d := destinationFor(t, srv, true)
		return newSink(t, srv, true), d
	},
	Reject:   rejectBySubject,
	Features: sinktest.Features{Headers: true, DedupsByKey: true, Outage: true, EveryTopic: true},
}

func TestSink_ConformanceJetStream(t *testing.T) {
	sinktest.Run(t, harnessJetStream)
}

func TestSink_HostileRowsJetStream(t *testing.T) {
	t.Parallel()
	sinktest.RunHostile(t, harnessJetStream)
}

func FuzzHostileRowsJetStream(f *testing.F) {
	sinktest.FuzzHostile(f, harnessJetStream)
}

// harnessCore makes the sinks the conformance and hostile-row suites run against.
var harnessCore = sinktest.Harness{
	New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
		srv := natstest.Start(t)
		d := destinationFor(t, srv, false)
		return newSink(t, srv, false), d
	},
	Reject:   rejectBySubject,
	Features: sinktest.Features{Headers: true, Outage: true, EveryTopic: true},
}

func TestSink_ConformanceCore(t *testing.T) {
	sinktest.Run(t, harnessCore)
}

func TestSink_HostileRowsCore(t *testing.T) {
	t.Parallel()
	sinktest.RunHostile(t, harnessCore)
}

func FuzzHostileRowsCore(f *testing.F) {
	sinktest.FuzzHostile(f, harnessCore)
}

// rejectBySubject gives m a topic no NATS server can take.
func rejectBySubject(m *sinks.Message) { m.Topic = "sinktest.*" }

// streamDestination is a JetStream stream as the suite sees it.
type streamDestination struct{ srv *natstest.Server }

func (d *streamDestination) Received(t testing.TB) []sinktest.Received {
	var out []sinktest.Received
	for _, m := range d.srv.Messages(t, stream) {
		out = append(out, received(m))
	}
	return out
}

func (d *streamDestination) Break(testing.TB) { d.srv.Stop() }

func (d *streamDestination) Purge(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.srv.JetStream().Stream(ctx, stream)
	if err == nil {
		err = st.Purge(ctx)
	}
	if err != nil {
		t.Fatalf("purge stream %s: %v", stream, err)
	}
}

// subscriberDestination is a core NATS subscriber as the suite sees it.
type subscriberDestination struct {
	srv  *natstest.Server
	mu   sync.Mutex
	msgs []sinktest.Received
}

func (d *subscriberDestination) add(m *nats.Msg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = append(d.msgs, received(m))
}

func (d *subscriberDestination) Received(testing.TB) []sinktest.Received {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]sinktest.Received(nil), d.msgs...)
}

func (d *subscriberDestination) Break(testing.TB) { d.srv.Stop() }

func (d *subscriberDestination) Purge(testing.TB) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = nil
}

func received(m *nats.Msg) sinktest.Received {
	return sinktest.Received{
		Topic:          strings.TrimPrefix(m.Subject, prefix),
		Payload:        m.Data,
		Headers:        m.Header,
		IdempotencyKey: m.Header.Get(jetstream.MsgIDHeader),
	}
}

// newSink returns a sink publishing to srv under prefix, closed at cleanup.
func newSink(t testing.TB, srv *natstest.Server, jetStream bool) *natssink.Sink {
	t.Helper()
	s, err := natssink.New(natssink.Config{
		URL:           srv.URL(),
		JetStream:     jetStream,
		SubjectPrefix: prefix,
		AckTimeout:    2 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })
	return s
}

// modes runs f in JetStream and in core NATS mode.
func modes(t *testing.T, f func(t *testing.T, jetStream bool)) {
	for _, js := range []bool{true, false} {
		name := "JetStream"
		if !js {
			name = "Core"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, js)
		})
	}
}

func deliver(t *testing.T, s sinks.Sink, msgs []sinks.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := s.Deliver(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(errs), len(msgs))
	}
	return errs
}

func TestSink_MaxPayloadExceededIsPermanent(t *testing.T) {
	modes(t, func(t *testing.T, jetStream bool) {
		srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = 1024 })
		srv.CreateStream(t, stream, prefix+">")
		s := newSink(t, srv, jetStream)
		msgs := sinktest.Messages(t, 3)
		msgs[1].Payload = make([]byte, 2048)
		errs := deliver(t, s, msgs)
		if !sinks.IsPermanent(errs[1]) {
			t.Errorf("payload over max_payload: got %v, want a permanent error", errs[1])
		}
		if errs[0] != nil || errs[2] != nil {
			t.Errorf("the other messages: %v, %v", errs[0], errs[2])
		}
	})
}

func TestSink_IdempotencyKeyWithOuterSpaceIsPermanent(t *testing.T) {
	modes(t, func(t *testing.T, jetStream bool) {
		srv := natstest.Start(t)
		srv.CreateStream(t, stream, prefix+">")
		s := newSink(t, srv, jetStream)
		// nats.go trims a header value: JetStream would take "k " for a
		// duplicate of "k", report it delivered and store nothing.
		msgs := sinktest.Messages(t, 3)
		msgs[1].IdempotencyKey = msgs[0].IdempotencyKey + " "
		msgs[2].IdempotencyKey = " " + msgs[0].IdempotencyKey
		errs := deliver(t, s, msgs)
		if errs[0] != nil {
			t.Fatalf("key %q: %v", msgs[0].IdempotencyKey, errs[0])
		}
		for _, i := range []int{1, 2} {
			if !sinks.IsPermanent(errs[i]) {
				t.Errorf("key %q: %v, want a permanent error", msgs[i].IdempotencyKey, errs[i])
			}
		}
		if jetStream {
			if n := srv.Count(t, stream); n != 1 {
				t.Errorf("the stream holds %d messages, want 1", n)
			}
		}
	})
}

func TestSink_InvalidSubjectIsPermanent(t *testing.T) {
	modes(t, func(t *testing.T, jetStream bool) {
		srv := natstest.Start(t)
		srv.CreateStream(t, stream, prefix+">")
		s := newSink(t, srv, jetStream)
		topics := []string{"orders..created", "orders.*", "orders.>", ">", "", "orders.", ".orders", "orders created", "orders\tcreated", "ok.topic"}
		msgs := sinktest.Messages(t, len(topics))
		for i := range msgs {
			msgs[i].Topic = topics[i]
		}
		errs := deliver(t, s, msgs)
		for i, topic := range topics {
			if topic == "ok.topic" {
				if errs[i] != nil {
					t.Errorf("topic %q: %v", topic, errs[i])
				}
				continue
			}
			if !sinks.IsPermanent(errs[i]) {
				t.Errorf("topic %q: got %v, want a permanent error", topic, errs[i])
			}
		}
	})
}

func TestSink_StreamMaxMsgSizeExceededIsPermanent(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := srv.JetStream().CreateStream(ctx, jetstream.StreamConfig{
		Name:       stream,
		Subjects:   []string{prefix + ">"},
		MaxMsgSize: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(t, srv, true)
	msgs := sinktest.Messages(t, 2)
	msgs[0].Payload = make([]byte, 512)
	errs := deliver(t, s, msgs)
	if !sinks.IsPermanent(errs[0]) {
		t.Errorf("payload over the stream's max_msg_size: got %v, want a permanent error", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("small message: %v", errs[1])
	}
}

func TestSink_ServerStoppedThenRestarted(t *testing.T) {
	modes(t, func(t *testing.T, jetStream bool) {
		srv := natstest.Start(t)
		srv.CreateStream(t, stream, prefix+">")
		s := newSink(t, srv, jetStream)

		srv.Stop()
		waitfor.Condition(t, 15*time.Second, "Available to report the outage", func() bool { return s.Available() != nil })
		if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("Available while the server is down: %v, want an error wrapping sinks.ErrNotAttempted", err)
		}
		msgs := sinktest.Messages(t, 5)
		for i, err := range deliver(t, s, msgs) {
			switch {
			case err == nil:
				t.Errorf("message %d reported delivered while the server is down", i)
			case sinks.IsPermanent(err):
				t.Errorf("message %d: an outage made a permanent failure: %v", i, err)
			case !errors.Is(err, sinks.ErrNotAttempted):
				t.Logf("message %d: transient %v", i, err)
			}
		}

		srv.Restart()
		waitfor.Condition(t, 15*time.Second, "the sink to reconnect", func() bool { return s.Available() == nil })
		// JetStream may need a moment after the restart to serve the
		// stream again: retry until delivered, as the relay would.
		waitfor.Condition(t, 15*time.Second, "deliveries to succeed after the restart", func() bool {
			errs := deliver(t, s, msgs)
			for _, err := range errs {
				if err != nil {
					return false
				}
			}
			return true
		})
		if jetStream {
			if n := srv.Count(t, stream); n != uint64(len(msgs)) {
				t.Errorf("stream holds %d messages, want %d", n, len(msgs))
			}
		}
	})
}

func TestSink_DuplicateMsgIDIsDelivered(t *testing.T) {
	srv := natstest.Start(t)
	srv.CreateStream(t, stream, prefix+">")
	s := newSink(t, srv, true)
	msgs := sinktest.Messages(t, 1)
	for attempt := 1; attempt <= 2; attempt++ {
		msgs[0].Attempt = attempt
		if err := deliver(t, s, msgs)[0]; err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
	}
	if n := srv.Count(t, stream); n != 1 {
		t.Errorf("stream holds %d messages, want 1: the duplicate should have been dropped", n)
	}
}

func TestSink_RowHeadersCannotSetNatsHeaders(t *testing.T) {
	modes(t, func(t *testing.T, jetStream bool) {
		srv := natstest.Start(t)
		srv.CreateStream(t, stream, prefix+">")
		nc := srv.Connect(t)
		sub, err := nc.SubscribeSync(prefix + ">")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		s := newSink(t, srv, jetStream)
		msgs := sinktest.Messages(t, 1)
		msgs[0].Headers = map[string]string{"Nats-Msg-Id": "forged", "nats-msg-id": "forged-too", "Nats-Rollup": "all", "nats-ttl": "1s", "x-kept": "yes"}
		if err := deliver(t, s, msgs)[0]; err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range m.Header {
			if strings.EqualFold(k, jetstream.MsgIDHeader) && (len(v) != 1 || v[0] != msgs[0].IdempotencyKey) {
				t.Errorf("header %s = %q, want only the row's key %q", k, v, msgs[0].IdempotencyKey)
			}
			if strings.HasPrefix(strings.ToLower(k), "nats-") && !strings.EqualFold(k, jetstream.MsgIDHeader) {
				t.Errorf("a row set the server header %s = %q", k, v)
			}
		}
		if m.Header.Get("x-kept") != "yes" {
			t.Error("an ordinary row header was dropped")
		}
	})
}

func TestRedact(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://alice:s3cret@127.0.0.1:4222", "nats://redacted@127.0.0.1:4222"},
		{"nats://s3cret@127.0.0.1:4222", "nats://redacted@127.0.0.1:4222"},
		{"nats://a:s3cret@h1:4222, tls://b:s3cret@h2:4222", "nats://redacted@h1:4222,tls://redacted@h2:4222"},
		{"alice:s3cret@127.0.0.1:4222", "nats://redacted@127.0.0.1:4222"},
		{"nats://alice:s3cret@h%zz:4222", "(unparsable URL)"},
		{"nats://alice:s3cret%@host:4222", "(unparsable URL)"},
	}
	for _, tt := range tests {
		got := natssink.Redact(tt.in)
		if got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q shows the secret", tt.in, got)
		}
	}
}

func TestValidateSubject(t *testing.T) {
	tests := []struct {
		subject string
		ok      bool
	}{
		{"orders", true},
		{"events.orders.created", true},
		{"events.orders-v2.created_at", true},
		{"événements.créés", true},
		{"", false},
		{"$JS.API.STREAM.DELETE.EVENTS", false},
		{"$KV.config.x", false},
		{"$SYS.REQ.SERVER.PING", false},
		{"_INBOX.abc.def", false},
		{"_INBOX", false},
		{"events.$JS.API", true},
		{"_inbox_like.orders", true},
		{".", false},
		{"orders.", false},
		{".orders", false},
		{"orders..created", false},
		{"orders.*", false},
		{"orders.>", false},
		{"*", false},
		{">", false},
		{"orders.*.created", false},
		{"orders created", false},
		{"orders\tcreated", false},
		{"orders\ncreated", false},
		{"orders\x00", false},
		{"orders\x7f", false},
		{"orders.a*", true}, // a wildcard only as a whole token
		{"orders.a>", true},
	}
	for _, tt := range tests {
		err := natssink.ValidateSubject(tt.subject)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateSubject(%q) = %v, want ok=%v", tt.subject, err, tt.ok)
		}
	}
}

// TestSink_HeadersAndPayloadOverMaxPayloadArePermanent: the server counts
// headers and payload together in max_payload. A message that fills it
// exactly is published; one byte more is refused before publishing, naming
// the sizes; headers over the relay's header budget too. A row's
// Idempotency-Key never travels beside Nats-Msg-Id.
func TestSink_HeadersAndPayloadOverMaxPayloadArePermanent(t *testing.T) {
	modes(t, func(t *testing.T, jetStream bool) {
		const max = 8192
		srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = max })
		srv.CreateStream(t, stream, prefix+">")
		s := newSink(t, srv, jetStream)
		msgs := sinktest.Messages(t, 4)
		for _, i := range []int{0, 1} {
			msgs[i].Headers = map[string]string{"x-pad": strings.Repeat("h", 4000), "Idempotency-Key": "forged"}
			// NATS/1.0, x-pad's and Nats-Msg-Id's lines, the end.
			hdr := len("NATS/1.0\r\n") + len("x-pad: \r\n") + 4000 + len("Nats-Msg-Id: \r\n") + len(msgs[i].IdempotencyKey) + len("\r\n")
			msgs[i].Payload = make([]byte, max-hdr+i)
		}
		msgs[2].Headers = map[string]string{"x-big": strings.Repeat("h", sinks.HeaderBytesMax)}
		errs := deliver(t, s, msgs)
		if errs[0] != nil || errs[3] != nil {
			t.Fatalf("the message that fills max_payload exactly: %v; a normal one: %v", errs[0], errs[3])
		}
		var limit *sinks.LimitError
		if !sinks.IsPermanent(errs[1]) || !errors.As(errs[1], &limit) || limit.Size != max+1 || limit.Max != max || !strings.Contains(errs[1].Error(), "max_payload") {
			t.Errorf("a byte over max_payload: %v, want a permanent *LimitError of %d bytes over %d", errs[1], max+1, max)
		}
		if !sinks.IsPermanent(errs[2]) || !errors.As(errs[2], &limit) || limit.Max != sinks.HeaderBytesMax {
			t.Errorf("headers over the budget: %v, want a permanent *LimitError", errs[2])
		}
		if jetStream {
			for _, m := range srv.Messages(t, stream) {
				if got := m.Header.Values("Idempotency-Key"); len(got) != 0 {
					t.Errorf("message %s carries the row's Idempotency-Key %q", m.Header.Get("Nats-Msg-Id"), got)
				}
			}
		}
	})
}
