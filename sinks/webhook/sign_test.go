package webhook_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/sinks"
)

func TestSink_SignatureVerifiesWithEachSecret(t *testing.T) {
	// The endpoint checks every request with the reference library, once
	// per secret; here each secret must verify on its own, as a receiver
	// that only knows one of them during a rotation would check.
	e := newEndpoint(t, 2)
	s := newSink(t, e, nil)
	m := message(t, nil)
	m.Payload = []byte("binary \x00\xff and \"quotes\" \n newline")
	before := time.Now().Unix()
	if err := deliverOne(t, s, m); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Unix()
	reqs := e.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	sigs := strings.Split(r.Header.Get("webhook-signature"), " ")
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature %q: want two space-separated signatures", r.Header.Get("webhook-signature"))
	}
	for i, secret := range e.Secrets {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		// Only this secret's signature: a receiver that has one secret.
		h := r.Header.Clone()
		h.Set("webhook-signature", sigs[i])
		if err := wh.Verify(r.Body, h); err != nil {
			t.Errorf("secret %d: %v", i+1, err)
		}
	}
	stranger, err := standardwebhooks.NewWebhook(webhooktest.NewSecret(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.Verify(r.Body, r.Header); err == nil {
		t.Error("a secret that was not configured verified the signature")
	}
	tampered := append([]byte(nil), r.Body...)
	tampered[0] ^= 1
	if err := standardwebhooksMust(t, e.Secrets[0]).Verify(tampered, r.Header); err == nil {
		t.Error("a changed body verified")
	}
	ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	if err != nil || ts < before || ts > after {
		t.Errorf("webhook-timestamp %q, want unix seconds from %d to %d", r.Header.Get("webhook-timestamp"), before, after)
	}
}

func standardwebhooksMust(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

func TestSink_WebhookIDStableAcrossRetries(t *testing.T) {
	e := newEndpoint(t, 1)
	var calls int
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		calls++ // requests are sequential here
		if calls == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return http.StatusInternalServerError
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	s := newSink(t, e, nil)
	m := message(t, nil)
	err := deliverOne(t, s, m)
	if err == nil || sinks.IsPermanent(err) {
		t.Fatalf("first attempt: %v, want a transient error", err)
	}
	m.Attempt++
	if err := deliverOne(t, s, m); err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	reqs := e.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if got := r.Header.Get("webhook-id"); got != m.IdempotencyKey {
			t.Errorf("attempt %d: webhook-id %q, want the idempotency key %q", i+1, got, m.IdempotencyKey)
		}
		if got := r.Header.Values("Idempotency-Key"); len(got) != 1 || got[0] != m.IdempotencyKey {
			t.Errorf("attempt %d: Idempotency-Key %q, want the idempotency key %q", i+1, got, m.IdempotencyKey)
		}
	}
}

func TestReadmeVerify_RejectsForgeries(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, nil)
	if err := deliverOne(t, s, message(t, nil)); err != nil {
		t.Fatal(err)
	}
	r := e.Requests()[0]
	if err := verify(e.Secrets[0], r.Header, r.Body); err != nil {
		t.Fatalf("genuine request: %v", err)
	}
	if err := verify(webhooktest.NewSecret(t), r.Header, r.Body); err == nil {
		t.Error("another secret verified")
	}
	if err := verify(e.Secrets[0], r.Header, append(r.Body, ' ')); err == nil {
		t.Error("a changed body verified")
	}
	old := r.Header.Clone()
	old.Set("webhook-timestamp", strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10))
	if err := verify(e.Secrets[0], old, r.Body); err == nil {
		t.Error("an hour-old timestamp verified")
	}
}
