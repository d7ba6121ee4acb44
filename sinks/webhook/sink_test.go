package webhook_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

func TestSink_Conformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) (sinks.Sink, sinktest.Destination) {
			e := newEndpoint(t, 2)
			return newSink(t, e, nil), e
		},
		Reject: func(m *sinks.Message) {
			m.Headers = map[string]string{"x-test-status": "422"}
		},
	})
}

// endpoint is a webhook receiver on a real HTTP server. It verifies every
// request's signature with the Standard Webhooks reference library, once per
// secret, records what it got and answers 204 unless told otherwise.
type endpoint struct {
	t         *testing.T
	srv       *httptest.Server
	secrets   []string // whsec_… as an operator writes them
	verifiers []*standardwebhooks.Webhook
	done      chan struct{} // closed at cleanup, releases hanging handlers

	// respond, when set, answers instead of the default; it returns the
	// status it wrote.
	respond func(w http.ResponseWriter, r *http.Request) int
	broken  atomic.Bool // answer 503 to everything

	mu       sync.Mutex
	requests []request
	received []sinktest.Received
	inFlight int
	maxIn    int
}

// request is one request as the endpoint saw it.
type request struct {
	header http.Header
	host   string
	body   []byte
	status int
}

// newEndpoint starts an endpoint with n fresh secrets.
func newEndpoint(t *testing.T, n int) *endpoint {
	t.Helper()
	e := &endpoint{t: t, done: make(chan struct{})}
	for range n {
		s := newSecret(t)
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		e.secrets = append(e.secrets, s)
		e.verifiers = append(e.verifiers, wh)
	}
	e.srv = httptest.NewServer(e)
	t.Cleanup(e.srv.Close)
	t.Cleanup(func() { close(e.done) }) // runs first: handlers return, Close can finish
	return e
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.inFlight++
	e.maxIn = max(e.maxIn, e.inFlight)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.inFlight--
		e.mu.Unlock()
	}()

	body, err := io.ReadAll(r.Body)
	if err != nil {
		e.t.Errorf("read request body: %v", err)
		return
	}
	for i, wh := range e.verifiers {
		if err := wh.Verify(body, r.Header); err != nil {
			e.t.Errorf("request %s: signature does not verify with secret %d: %v", r.Header.Get("webhook-id"), i+1, err)
		}
	}
	var status int
	switch {
	case e.respond != nil:
		status = e.respond(w, r)
	case e.broken.Load():
		status = http.StatusServiceUnavailable
		w.WriteHeader(status)
	case r.Header.Get("x-test-status") != "":
		status, _ = strconv.Atoi(r.Header.Get("x-test-status"))
		w.WriteHeader(status)
	default:
		status = http.StatusNoContent
		w.WriteHeader(status)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests = append(e.requests, request{header: r.Header.Clone(), host: r.Host, body: body, status: status})
	if status >= 200 && status < 300 {
		e.received = append(e.received, sinktest.Received{
			Topic:          r.Header.Get("Outbox-Topic"),
			Payload:        body,
			Headers:        r.Header.Clone(),
			IdempotencyKey: r.Header.Get("webhook-id"),
		})
	}
}

// Received implements sinktest.Destination: the requests answered 2xx.
func (e *endpoint) Received(testing.TB) []sinktest.Received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]sinktest.Received(nil), e.received...)
}

// Break implements sinktest.Breaker.
func (e *endpoint) Break(testing.TB) { e.broken.Store(true) }

// Requests returns every request so far.
func (e *endpoint) Requests() []request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]request(nil), e.requests...)
}

// newSecret returns a fresh secret as an operator would write it.
func newSecret(t testing.TB) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// newSink returns a sink posting to e with e's secrets, closed at cleanup;
// configure adjusts the config.
func newSink(t *testing.T, e *endpoint, configure func(*webhook.Config)) *webhook.Sink {
	t.Helper()
	var secrets []webhook.Secret
	for _, s := range e.secrets {
		parsed, err := webhook.ParseSecrets(s)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, parsed...)
	}
	cfg := webhook.Config{
		URL:     e.srv.URL + "/hooks/outbox",
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

// waitFor polls cond until it holds, failing t after 15 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
