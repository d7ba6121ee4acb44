package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

func TestSink_StatusOutcomes(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, nil)
	const (
		delivered = iota
		permanent
		transient
	)
	tests := []struct {
		status int
		want   int
	}{
		{200, delivered}, {201, delivered}, {202, delivered}, {204, delivered},
		{400, permanent}, {401, transient}, {403, transient}, {404, transient},
		{410, permanent}, {413, permanent}, {415, permanent}, {422, permanent},
		{408, transient}, {425, transient}, {429, transient},
		{500, transient}, {502, transient}, {503, transient}, {504, transient},
		{405, transient}, {409, transient}, {300, transient}, {304, transient},
	}
	for _, tt := range tests {
		err := deliverOne(t, s, message(t, map[string]string{"x-test-status": strconv.Itoa(tt.status)}))
		switch {
		case tt.want == delivered && err != nil:
			t.Errorf("%d: %v, want delivered", tt.status, err)
		case tt.want == permanent && !sinks.IsPermanent(err):
			t.Errorf("%d: %v, want a permanent error", tt.status, err)
		case tt.want == transient && (err == nil || sinks.IsPermanent(err) || errors.Is(err, sinks.ErrNotAttempted)):
			t.Errorf("%d: %v, want a transient error", tt.status, err)
		}
		if err != nil && !strings.Contains(err.Error(), strconv.Itoa(tt.status)) {
			t.Errorf("%d: error %q does not name the status", tt.status, err)
		}
		if _, ok := sinks.RetryDelay(err); ok {
			t.Errorf("%d without Retry-After: the error asks for a delay", tt.status)
		}
		var se *webhook.StatusError
		if err != nil && (!errors.As(err, &se) || se.StatusCode != tt.status) {
			t.Errorf("%d: %v is not a StatusError with that code", tt.status, err)
		}
	}
}

func TestSink_PermanentErrorHasStatusAndBodyExcerpt(t *testing.T) {
	e := newEndpoint(t, 1)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte("endpoint\r\ndisabled:\x00 \xff\xfe gone for good " + strings.Repeat("é", 2000)))
		return http.StatusGone
	})
	s := newSink(t, e, nil)
	err := deliverOne(t, s, message(t, nil))
	if !sinks.IsPermanent(err) {
		t.Fatalf("410: %v, want a permanent error", err)
	}
	text := err.Error()
	if !strings.HasPrefix(text, "webhook responded 410 Gone: endpoint disabled: gone for good éé") {
		t.Errorf("error %q: want the status and the start of the body, control characters as spaces", text)
	}
	if !utf8.ValidString(text) || strings.ContainsAny(text, "\x00\r\n") {
		t.Errorf("error %q is not one line of valid UTF-8", text)
	}
	if len(text) > 600 {
		t.Errorf("error is %d bytes: the body excerpt is not bounded", len(text))
	}
	if !strings.HasSuffix(text, "…") {
		t.Errorf("error %q: a cut body should end with an ellipsis", text)
	}
}

func TestSink_RetryAfterDelaysItsMessageOnly(t *testing.T) {
	e := newEndpoint(t, 1)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if r.Header.Get("x-test-limit") != "" {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return http.StatusTooManyRequests
		}
		return 0
	})
	s := newSink(t, e, nil)
	err := deliverOne(t, s, message(t, map[string]string{"x-test-limit": "1"}))
	if err == nil || sinks.IsPermanent(err) {
		t.Fatalf("429: %v, want a transient error", err)
	}
	if d, ok := sinks.RetryDelay(err); !ok || d < time.Second {
		t.Errorf("429 with Retry-After: 1: RetryDelay = %s, %v; want at least 1s", d, ok)
	}
	if err := s.Available(); err != nil {
		t.Errorf("one Retry-After paused the whole sink: %v", err)
	}
	if err := deliverOne(t, s, message(t, nil)); err != nil {
		t.Errorf("another message right after: %v", err)
	}
}

func TestSink_AnEndpointWideRateLimitPausesTheSink(t *testing.T) {
	e := newEndpoint(t, 1)
	var limited atomic.Bool
	limited.Store(true)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if limited.Load() {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return http.StatusTooManyRequests
		}
		return 0
	})
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency = 1 })
	start := time.Now()
	for i, err := range deliver(t, s, sinktest.Messages(t, 12)) {
		if err == nil || sinks.IsPermanent(err) {
			t.Fatalf("message %d: %v, want transient", i, err)
		}
	}
	limited.Store(false)
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("Available after every response asked to wait: %v, want a pause wrapping ErrNotAttempted", err)
	}
	waitfor.Condition(t, 15*time.Second, "the pause to end", func() bool { return s.Available() == nil })
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("available again after %s, before the 1s the endpoint asked for", waited)
	}
	if err := deliverOne(t, s, message(t, nil)); err != nil {
		t.Errorf("after the pause: %v", err)
	}
}

func TestSink_DeliverDuringPauseSendsNothing(t *testing.T) {
	e := newEndpoint(t, 1)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusServiceUnavailable)
		return http.StatusServiceUnavailable
	})
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency = 1 })
	err := deliverOne(t, s, message(t, nil))
	if d, ok := sinks.RetryDelay(err); !ok || d != 120*time.Second {
		t.Fatalf("503 with Retry-After: 120: %v (delay %s), want a delay of 120s", err, d)
	}
	// Nine more such answers: every recent response asked to wait.
	deliver(t, s, sinktest.Messages(t, 9))
	before := len(e.Requests())
	for i, err := range deliver(t, s, sinktest.Messages(t, 5)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("message %d during the pause: %v, want ErrNotAttempted", i, err)
		}
	}
	if n := len(e.Requests()); n != before || n != 10 {
		t.Errorf("%d requests, then %d: want 10, then nothing sent during the pause", before, n)
	}
}

func TestSink_RetryAfterHTTPDate(t *testing.T) {
	e := newEndpoint(t, 1)
	var retryAt atomic.Value
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Retry-After", retryAt.Load().(time.Time).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
		return http.StatusTooManyRequests
	})
	s := newSink(t, e, nil)

	retryAt.Store(time.Now().Add(-time.Hour))
	err := deliverOne(t, s, message(t, nil))
	if d, ok := sinks.RetryDelay(err); !ok || d != 0 {
		t.Errorf("Retry-After in the past: delay %s, %v; want 0", d, ok)
	}
	if err := s.Available(); err != nil {
		t.Errorf("Retry-After in the past paused the sink: %v", err)
	}

	retryAt.Store(time.Now().Add(3 * time.Second))
	err = deliverOne(t, s, message(t, nil))
	// HTTP dates have whole seconds: the delay is between 1s and 3s.
	if d, ok := sinks.RetryDelay(err); !ok || d < time.Second || d > 3*time.Second {
		t.Errorf("Retry-After 3s ahead: delay %s, %v; want 1s to 3s", d, ok)
	}
}

func TestSink_RetryAfterIsClamped(t *testing.T) {
	e := newEndpoint(t, 1)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Retry-After", "999999999999999999999")
		w.WriteHeader(http.StatusTooManyRequests)
		return http.StatusTooManyRequests
	})
	s := newSink(t, e, func(c *webhook.Config) { c.MaxRetryAfter = 2 * time.Second })
	err := deliverOne(t, s, message(t, nil))
	if d, ok := sinks.RetryDelay(err); !ok || d != 2*time.Second {
		t.Errorf("huge Retry-After: delay %s, %v; want MaxRetryAfter, 2s", d, ok)
	}
}

func TestSink_InvalidRetryAfterIsIgnored(t *testing.T) {
	e := newEndpoint(t, 1)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Retry-After", "soon")
		w.WriteHeader(http.StatusTooManyRequests)
		return http.StatusTooManyRequests
	})
	s := newSink(t, e, nil)
	err := deliverOne(t, s, message(t, nil))
	if err == nil || sinks.IsPermanent(err) {
		t.Fatalf("429: %v, want a transient error", err)
	}
	if _, ok := sinks.RetryDelay(err); ok {
		t.Error("an unparsable Retry-After gave a delay")
	}
	if err := s.Available(); err != nil {
		t.Errorf("an unparsable Retry-After paused the sink: %v", err)
	}
}

func TestSink_RedirectIsNotFollowed(t *testing.T) {
	e := newEndpoint(t, 1)
	var followed atomic.Int32
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if r.URL.Path == "/moved" {
			followed.Add(1)
			w.WriteHeader(http.StatusNoContent)
			return http.StatusNoContent
		}
		status, _ := strconv.Atoi(r.Header.Get("x-redirect-status"))
		w.Header().Set("Location", "/moved?token=s3cret")
		w.WriteHeader(status)
		return status
	})
	s := newSink(t, e, nil)
	for _, status := range []int{301, 302, 303, 307, 308} {
		err := deliverOne(t, s, message(t, map[string]string{"x-redirect-status": strconv.Itoa(status)}))
		if err == nil || sinks.IsPermanent(err) || errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("%d: %v, want a transient error", status, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "/moved") || !strings.Contains(err.Error(), "not followed")) {
			t.Errorf("%d: error %q should say the redirect to /moved was not followed", status, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error %q shows the Location's query", err)
		}
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}
