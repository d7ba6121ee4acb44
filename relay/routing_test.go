package relay_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// newWebhookSink returns a webhook sink posting to rcv.
func newWebhookSink(t *testing.T, rcv *webhooktest.Receiver, timeout time.Duration) *webhook.Sink {
	t.Helper()
	secrets, err := webhook.ParseSecrets(rcv.Secret)
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.New(webhook.Config{URL: rcv.URL, Secrets: secrets, Timeout: timeout, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// routed sets up both sinks, nats the default.
func routed(t *testing.T) (*bundle, *webhooktest.Receiver, relay.Config) {
	b := setup(t)
	rcv := webhooktest.NewReceiver(t)
	cfg := b.config(t)
	cfg.Sinks = map[string]sinks.Sink{"nats": b.sink, "webhook": newWebhookSink(t, rcv, 2*time.Second)}
	cfg.DefaultSink = "nats"
	return b, rcv, cfg
}

// insertMixed inserts n rows, every other one for the webhook sink and the
// rest without a destination (the default, nats).
func insertMixed(t *testing.T, b *bundle, n int) {
	t.Helper()
	b.db.Exec(t, `
INSERT INTO %s.messages (topic, payload, destination, headers)
SELECT 'events.orders.created',
       convert_to(json_build_object('seq', i)::text, 'UTF8') || '\x00ff'::bytea,
       CASE WHEN i % 2 = 0 THEN 'webhook' END,
       jsonb_build_object('traceparent', '00-' || lpad(to_hex(i), 32, '0') || '-00f067aa0ba902b7-01')
  FROM generate_series(1, $1) AS i`, n)
}

// webhookRowsAccepted checks that the receiver accepted exactly the archived
// webhook rows, byte for byte.
func assertReceiverMatchesArchive(t *testing.T, b *bundle, rcv *webhooktest.Receiver, want int) {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), "SELECT idempotency_key, payload FROM "+b.db.Table("archive")+" WHERE destination = 'webhook'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	accepted := rcv.Accepted()
	n := 0
	for rows.Next() {
		var id string
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			t.Fatal(err)
		}
		n++
		if got, ok := accepted[id]; !ok || !bytes.Equal(got, payload) {
			t.Fatalf("webhook %s: received %q, want %q", id, got, payload)
		}
	}
	if n != want || len(accepted) != want {
		t.Fatalf("archive holds %d webhook rows and the receiver accepted %d, want %d", n, len(accepted), want)
	}
}

func TestRouting_AWebhookOutageDoesNotHoldUpNATS(t *testing.T) {
	t.Parallel()
	b, rcv, cfg := routed(t)
	// The endpoint is down: every connection is dropped without a response.
	rcv.RespondWith(func(w http.ResponseWriter, _ *http.Request) int {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return http.StatusServiceUnavailable
	})
	relaytest.Start(t, b.db.Pool, cfg)
	const n = 3000
	insertMixed(t, b, n)

	waitfor.Condition(t, 60*time.Second, "every NATS row to arrive and be archived while the webhook is down", func() bool {
		return b.nats.Count(t, stream) == n/2 && b.db.Count(t, "messages_all") == n/2
	})
	if got := len(rcv.Accepted()); got != 0 {
		t.Fatalf("the receiver accepted %d requests while down", got)
	}

	rcv.RespondWith(nil)
	relaytest.WaitDrained(t, b.db, relaytest.Budget(n))
	relaytest.AssertStreamMatchesArchiveWhere(t, b.db, b.nats, stream, "destination IS NULL", n/2)
	assertReceiverMatchesArchive(t, b, rcv, n/2)
	if got := b.db.Count(t, "dead_letters"); got != 0 {
		t.Errorf("%d rows were dead-lettered", got)
	}
}

func TestRouting_ANATSOutageDoesNotHoldUpWebhooks(t *testing.T) {
	t.Parallel()
	b, rcv, cfg := routed(t)
	b.nats.Stop()
	relaytest.Start(t, b.db.Pool, cfg)
	const n = 3000
	insertMixed(t, b, n)

	waitfor.Condition(t, 60*time.Second, "every webhook row to arrive and be archived while NATS is down", func() bool {
		return len(rcv.Accepted()) == n/2 && b.db.Count(t, "messages_all") == n/2
	})
	b.nats.Restart()
	relaytest.WaitDrained(t, b.db, relaytest.Budget(n))
	relaytest.AssertStreamMatchesArchiveWhere(t, b.db, b.nats, stream, "destination IS NULL", n/2)
	assertReceiverMatchesArchive(t, b, rcv, n/2)
}

func TestRouting_RetryAfterDelaysTheNextAttempt(t *testing.T) {
	t.Parallel()
	b, rcv, cfg := routed(t)
	cfg.BackoffMin, cfg.BackoffMax = 10*time.Millisecond, 10*time.Millisecond
	first := true
	rcv.RespondWith(func(w http.ResponseWriter, _ *http.Request) int {
		if !first {
			return 0
		}
		first = false
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return http.StatusTooManyRequests
	})
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, destination, idempotency_key) VALUES ('events.a', 'x', 'webhook', 'slow-down')`)
	relaytest.WaitDrained(t, b.db, 20*time.Second)
	at := rcv.Attempts("slow-down")
	if len(at) != 2 {
		t.Fatalf("%d attempts, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < time.Second {
		t.Errorf("the retry came %s after a 429 with Retry-After: 1", gap)
	}
	assertReceiverMatchesArchive(t, b, rcv, 1)
}

func TestRouting_GoneIsDeadLetteredAtOnceWithTheResponse(t *testing.T) {
	t.Parallel()
	b, rcv, cfg := routed(t)
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if r.Header.Get("webhook-id") != "gone" {
			return 0
		}
		http.Error(w, "customer deleted", http.StatusGone)
		return http.StatusGone
	})
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, destination, idempotency_key) VALUES
	              ('events.a', 'x', 'webhook', 'gone'), ('events.a', 'y', 'webhook', 'fine')`)
	relaytest.WaitDrained(t, b.db, 20*time.Second)
	var reason, errText string
	var attempts int
	err := b.db.Pool.QueryRow(context.Background(), "SELECT reason, error, attempts FROM "+b.db.Table("dead_letters")+" WHERE idempotency_key = 'gone'").Scan(&reason, &errText, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	if reason != outbox.ReasonPermanent || attempts != 1 || !strings.Contains(errText, "410") || !strings.Contains(errText, "customer deleted") {
		t.Errorf("dead letter: reason %q after %d attempts, error %q; want permanent after 1, with the status and body", reason, attempts, errText)
	}
	if _, ok := rcv.Accepted()["fine"]; !ok {
		t.Error("the other message was not delivered")
	}
}

func TestRouting_AHangingReceiverTimesOutAndIsRetried(t *testing.T) {
	t.Parallel()
	b, rcv, cfg := routed(t)
	cfg.Sinks["webhook"] = newWebhookSink(t, rcv, 300*time.Millisecond)
	cfg.BackoffMin, cfg.BackoffMax = 10*time.Millisecond, 10*time.Millisecond
	hung := false
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if hung {
			return 0
		}
		hung = true
		return rcv.Hang(r) // never answers
	})
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, destination, idempotency_key) VALUES ('events.a', 'x', 'webhook', 'patience')`)
	relaytest.WaitDrained(t, b.db, 20*time.Second)
	if n := len(rcv.Attempts("patience")); n != 2 {
		t.Errorf("%d attempts, want 2 (a timeout, then a delivery)", n)
	}
	if got := testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("webhook", "retried")); got != 1 {
		t.Errorf("retried = %v, want 1", got)
	}
	assertReceiverMatchesArchive(t, b, rcv, 1)
}
