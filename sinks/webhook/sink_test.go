package webhook_test

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// harness makes the sinks the conformance and hostile-row suites run against.
var harness = sinktest.Harness{
	New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
		e := newEndpoint(t, 2)
		return newSink(t, e, nil), e
	},
	Reject: func(m *sinks.Message) {
		m.Headers = map[string]string{"x-test-status": "422"}
	},
	Features: sinktest.Features{Headers: true, Outage: true, EveryTopic: true},
}

func TestSink_Conformance(t *testing.T) {
	sinktest.Run(t, harness)
}

func TestSink_HostileRows(t *testing.T) {
	t.Parallel()
	sinktest.RunHostile(t, harness)
}

func FuzzHostileRows(f *testing.F) {
	sinktest.FuzzHostile(f, harness)
}

// newEndpoint starts a webhook receiver verifying n secrets, which answers
// a request carrying an x-test-status header with that status.
func newEndpoint(t testing.TB, n int) *webhooktest.Receiver {
	t.Helper()
	e := webhooktest.NewReceiverWithSecrets(t, n)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		status, _ := strconv.Atoi(r.Header.Get("x-test-status"))
		if status != 0 {
			w.WriteHeader(status)
		}
		return status
	})
	return e
}

// newSink returns a sink posting to e with e's secrets, closed at cleanup;
// configure adjusts the config.
func newSink(t testing.TB, e *webhooktest.Receiver, configure func(*webhook.Config)) *webhook.Sink {
	t.Helper()
	var secrets []webhook.Secret
	for _, s := range e.Secrets {
		parsed, err := webhook.ParseSecrets(s)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, parsed...)
	}
	cfg := webhook.Config{
		URL:     e.Server.URL + "/hooks/outbox",
		Secrets: secrets,
		Timeout: 5 * time.Second,
		Logger:  slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if configure != nil {
		configure(&cfg)
	}
	s, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// deliver delivers msgs with a generous deadline.
func deliver(t *testing.T, s sinks.Sink, msgs []sinks.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := s.Deliver(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(errs), len(msgs))
	}
	return errs
}

// deliverOne delivers a single message.
func deliverOne(t *testing.T, s sinks.Sink, m sinks.Message) error {
	t.Helper()
	return deliver(t, s, []sinks.Message{m})[0]
}

// message returns a fresh message; withHeaders sets its headers.
func message(t testing.TB, headers map[string]string) sinks.Message {
	t.Helper()
	m := sinktest.Messages(t, 1)[0]
	m.Headers = headers
	return m
}
