package webhook_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

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
	sigs := strings.Split(r.header.Get("webhook-signature"), " ")
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature %q: want two space-separated signatures", r.header.Get("webhook-signature"))
	}
	for i, secret := range e.secrets {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		// Only this secret's signature: a receiver that has one secret.
		h := r.header.Clone()
		h.Set("webhook-signature", sigs[i])
		if err := wh.Verify(r.body, h); err != nil {
			t.Errorf("secret %d: %v", i+1, err)
		}
	}
	stranger, err := standardwebhooks.NewWebhook(newSecret(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.Verify(r.body, r.header); err == nil {
		t.Error("a secret that was not configured verified the signature")
	}
	tampered := append([]byte(nil), r.body...)
	tampered[0] ^= 1
	if err := standardwebhooksMust(t, e.secrets[0]).Verify(tampered, r.header); err == nil {
		t.Error("a changed body verified")
	}
	ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if err != nil || ts < before || ts > after {
		t.Errorf("webhook-timestamp %q, want unix seconds from %d to %d", r.header.Get("webhook-timestamp"), before, after)
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
	e.respond = func(w http.ResponseWriter, r *http.Request) int {
		calls++ // requests are sequential here
		if calls == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return http.StatusInternalServerError
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	}
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
		if got := r.header.Get("webhook-id"); got != m.IdempotencyKey {
			t.Errorf("attempt %d: webhook-id %q, want the idempotency key %q", i+1, got, m.IdempotencyKey)
		}
		if got := r.header.Values("Idempotency-Key"); len(got) != 1 || got[0] != m.IdempotencyKey {
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
	if err := verify(e.secrets[0], r.header, r.body); err != nil {
		t.Fatalf("genuine request: %v", err)
	}
	if err := verify(newSecret(t), r.header, r.body); err == nil {
		t.Error("another secret verified")
	}
	if err := verify(e.secrets[0], r.header, append(r.body, ' ')); err == nil {
		t.Error("a changed body verified")
	}
	old := r.header.Clone()
	old.Set("webhook-timestamp", strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10))
	if err := verify(e.secrets[0], old, r.body); err == nil {
		t.Error("an hour-old timestamp verified")
	}
}
