package relaytest

import (
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Receiver is a real HTTP webhook endpoint for tests. It checks every
// request's Standard Webhooks signature with the specification's reference
// library, records what it accepted, and can be switched to fail.
type Receiver struct {
	// Secret is the whsec_ secret the relay must sign with.
	Secret string
	// URL is the endpoint's address.
	URL string

	wh      *standardwebhooks.Webhook
	respond atomic.Pointer[func(w http.ResponseWriter, r *http.Request) bool]

	mu       sync.Mutex
	accepted map[string][]byte      // webhook-id → body
	attempts map[string][]time.Time // webhook-id → arrival of every request
	bad      []string               // why requests were refused
}

// NewReceiver starts a receiver, closed at cleanup.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	r := &Receiver{
		Secret:   "whsec_" + base64.StdEncoding.EncodeToString(key),
		accepted: map[string][]byte{},
		attempts: map[string][]time.Time{},
	}
	wh, err := standardwebhooks.NewWebhook(r.Secret)
	if err != nil {
		t.Fatal(err)
	}
	r.wh = wh
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/hooks/outbox"
	return r
}

// RespondWith makes the receiver answer with f first; f returns true when
// it wrote the response itself, false to accept the request normally.
// RespondWith(nil) restores normal service.
func (r *Receiver) RespondWith(f func(w http.ResponseWriter, req *http.Request) bool) {
	if f == nil {
		r.respond.Store(nil)
		return
	}
	r.respond.Store(&f)
}

// ServeHTTP verifies, records and answers one request.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	r.attempts[id] = append(r.attempts[id], time.Now())
	r.mu.Unlock()
	if f := r.respond.Load(); f != nil && (*f)(w, req) {
		return
	}
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.mu.Lock()
		r.bad = append(r.bad, id+": "+err.Error())
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	if req.Header.Get("Idempotency-Key") != id {
		r.mu.Lock()
		r.bad = append(r.bad, id+": Idempotency-Key differs from webhook-id")
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.accepted[id] = body
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Accepted returns the bodies accepted so far, by webhook-id.
func (r *Receiver) Accepted() map[string][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]byte, len(r.accepted))
	for k, v := range r.accepted {
		out[k] = v
	}
	return out
}

// Attempts returns when each request for webhook-id id arrived.
func (r *Receiver) Attempts(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.attempts[id]...)
}

// Refused returns why requests failed verification; a test expects none.
func (r *Receiver) Refused() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}
