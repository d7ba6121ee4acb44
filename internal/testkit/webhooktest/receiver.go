// Package webhooktest is a real webhook endpoint for tests: an httptest
// server that verifies every request's Standard Webhooks signature with the
// specification's reference library, records what arrived, and answers
// however a test tells it to (fail, hang, ask to retry later).
package webhooktest

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// Path is where the receiver expects requests: URL ends with it.
const Path = "/hooks/outbox"

// Respond answers a request instead of the receiver's default (204) and
// returns the status it wrote, or 0 to let the receiver answer as usual.
type Respond func(w http.ResponseWriter, r *http.Request) int

// Receiver is a webhook endpoint on a real HTTP server. Its zero value is
// not usable: make one with NewReceiver.
type Receiver struct {
	// Secrets are the whsec_ secrets every request must be signed with
	// (each verified), as an operator writes them; Secret is the first.
	Secrets []string
	Secret  string
	// URL is the endpoint: the server's address and Path.
	URL string
	// Server is the underlying test server.
	Server *httptest.Server

	t         testing.TB
	verifiers []*standardwebhooks.Webhook
	done      chan struct{} // closed at cleanup: releases hanging handlers
	respond   atomic.Pointer[Respond]
	broken    atomic.Bool

	mu       sync.Mutex
	requests []Request
	arrived  map[string]int // requests so far, by webhook-id
	inFlight int
	maxIn    int
}

// Request is one request as the receiver saw it.
type Request struct {
	Header http.Header
	Host   string
	Body   []byte
	Status int
	At     time.Time
}

// ID is the request's webhook-id.
func (r Request) ID() string { return r.Header.Get("webhook-id") }

// NewReceiver starts a receiver with one fresh secret, closed at cleanup.
func NewReceiver(t testing.TB) *Receiver { return NewReceiverWithSecrets(t, 1) }

// NewReceiverWithSecrets starts a receiver that verifies every request with
// each of n fresh secrets (a sink signing with all of them during a
// rotation), closed at cleanup.
func NewReceiverWithSecrets(t testing.TB, n int) *Receiver {
	t.Helper()
	return newReceiver(t, n, (*httptest.Server).Start)
}

// NewTLSReceiver starts a receiver with one fresh secret on an https
// server with the given TLS configuration (its certificate, and whether it
// requires client certificates), closed at cleanup.
func NewTLSReceiver(t testing.TB, config *tls.Config) *Receiver {
	t.Helper()
	return newReceiver(t, 1, func(s *httptest.Server) {
		s.TLS = config
		// Refused handshakes are what the tests make: not worth a line.
		s.Config.ErrorLog = log.New(io.Discard, "", 0)
		s.StartTLS()
	})
}

// newReceiver makes a receiver verifying n fresh secrets and starts its
// server with start.
func newReceiver(t testing.TB, n int, start func(*httptest.Server)) *Receiver {
	t.Helper()
	r := &Receiver{t: t, done: make(chan struct{}), arrived: map[string]int{}}
	for range n {
		s := NewSecret(t)
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		r.Secrets = append(r.Secrets, s)
		r.verifiers = append(r.verifiers, wh)
	}
	r.Secret = r.Secrets[0]
	r.Server = httptest.NewUnstartedServer(r)
	start(r.Server)
	r.URL = r.Server.URL + Path
	t.Cleanup(r.Server.Close)
	t.Cleanup(func() { close(r.done) }) // runs first: hanging handlers return
	return r
}

// NewSecret returns a fresh secret as an operator would write it.
func NewSecret(t testing.TB) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// RespondWith makes f answer every request first; nil restores the default.
func (r *Receiver) RespondWith(f Respond) {
	if f == nil {
		r.respond.Store(nil)
		return
	}
	r.respond.Store(&f)
}

// Hang holds the request until the client gives up or the test ends, and
// answers nothing: for use in a Respond.
func (r *Receiver) Hang(req *http.Request) int {
	select {
	case <-req.Context().Done():
	case <-r.done:
	}
	return http.StatusServiceUnavailable
}

// Done is closed when the test ends: a handler that waits for something
// must also wait for it, or the server cannot close.
func (r *Receiver) Done() <-chan struct{} { return r.done }

// Break implements sinktest.Breaker: every later request gets 503.
func (r *Receiver) Break(testing.TB) { r.broken.Store(true) }

// Repair undoes Break.
func (r *Receiver) Repair() { r.broken.Store(false) }

// ServeHTTP verifies, records and answers one request. A request whose
// signature does not verify fails the test.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	r.mu.Lock()
	r.arrived[req.Header.Get("webhook-id")]++
	r.inFlight++
	r.maxIn = max(r.maxIn, r.inFlight)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the client went away
	}
	for i, wh := range r.verifiers {
		if err := wh.Verify(body, req.Header); err != nil {
			r.t.Errorf("webhook request %s: signature does not verify with secret %d: %v", req.Header.Get("webhook-id"), i+1, err)
		}
	}
	if req.Header.Get("Idempotency-Key") != req.Header.Get("webhook-id") {
		r.t.Errorf("webhook request %s: Idempotency-Key %q differs from webhook-id", req.Header.Get("webhook-id"), req.Header.Get("Idempotency-Key"))
	}
	status := 0
	if f := r.respond.Load(); f != nil {
		status = (*f)(w, req)
	}
	if status == 0 {
		status = http.StatusNoContent
		if r.broken.Load() {
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
	}
	r.mu.Lock()
	r.requests = append(r.requests, Request{Header: req.Header.Clone(), Host: req.Host, Body: body, Status: status, At: at})
	r.mu.Unlock()
}

// Requests returns every request so far, in the order they were answered.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

// Received implements sinktest.Destination: the requests answered 2xx.
func (r *Receiver) Received(testing.TB) []sinktest.Received {
	var out []sinktest.Received
	for _, req := range r.Requests() {
		if req.Status >= 200 && req.Status < 300 {
			out = append(out, sinktest.Received{
				Topic: req.Header.Get("Outbox-Topic"), Payload: req.Body,
				Headers: req.Header, IdempotencyKey: req.ID(),
			})
		}
	}
	return out
}

// Accepted returns the body of every request answered 2xx, by webhook-id.
func (r *Receiver) Accepted() map[string][]byte {
	out := map[string][]byte{}
	for _, req := range r.Requests() {
		if req.Status >= 200 && req.Status < 300 {
			out[req.ID()] = req.Body
		}
	}
	return out
}

// Attempts returns when each request for webhook-id id arrived.
func (r *Receiver) Attempts(id string) []time.Time {
	var out []time.Time
	for _, req := range r.Requests() {
		if req.ID() == id {
			out = append(out, req.At)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// Arrived returns how many requests for webhook-id id have arrived so far,
// counting the one being answered: cheap enough to call from a Respond.
func (r *Receiver) Arrived(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.arrived[id]
}

// InFlight returns the requests in progress now.
func (r *Receiver) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight
}

// MaxInFlight returns the most requests that were in progress at once.
func (r *Receiver) MaxInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxIn
}
