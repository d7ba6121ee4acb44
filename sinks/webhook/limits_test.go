package webhook_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// hang makes e hold every request until the client gives up or the test
// ends; arrived receives a value per request.
func hang(e *webhooktest.Receiver) (arrived chan struct{}) {
	arrived = make(chan struct{}, 100)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-e.Done():
		}
		return 0
	})
	return arrived
}

func TestSink_HangingReceiverTimesOut(t *testing.T) {
	e := newEndpoint(t, 1)
	hang(e)
	s := newSink(t, e, func(c *webhook.Config) { c.Timeout = 300 * time.Millisecond })
	err := deliverOne(t, s, message(t, nil))
	switch {
	case err == nil:
		t.Fatal("a request without response was reported delivered")
	case sinks.IsPermanent(err), errors.Is(err, sinks.ErrNotAttempted):
		t.Fatalf("timeout: %v, want a transient error", err)
	case !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no response within"):
		t.Errorf("timeout: %q, want it to say the request timed out", err)
	}
}

func TestSink_DeliverReturnsByItsDeadline(t *testing.T) {
	e := newEndpoint(t, 1)
	hang(e)
	s := newSink(t, e, func(c *webhook.Config) {
		c.Timeout = time.Second
		c.Concurrency = 2
	})
	const budget = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	errs := s.Deliver(ctx, sinktest.Messages(t, 6))
	// A bound, not a speed: Deliver must not outlive its deadline (plenty
	// of slack for a loaded machine under -race).
	if took := time.Since(start); took > budget+2*time.Second {
		t.Errorf("Deliver took %s with a deadline of %s", took, budget)
	}
	for i, err := range errs {
		switch {
		case err == nil:
			t.Errorf("message %d reported delivered by a receiver that never answers", i)
		case sinks.IsPermanent(err):
			t.Errorf("message %d: %v, want transient or not attempted", i, err)
		case i < 2 && errors.Is(err, sinks.ErrNotAttempted):
			t.Errorf("message %d was sent but reported not attempted: %v", i, err)
		case i >= 2 && !errors.Is(err, sinks.ErrNotAttempted):
			// No slot freed before the deadline was closer than the
			// timeout: these were never sent.
			t.Errorf("message %d: %v, want ErrNotAttempted", i, err)
		}
	}
	if n := len(e.Requests()); n > 2 {
		t.Errorf("%d requests started, want 2", n)
	}
}

func TestSink_NoRequestStartsWithLessTimeThanTheTimeout(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, func(c *webhook.Config) { c.Timeout = 10 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, err := range s.Deliver(ctx, sinktest.Messages(t, 3)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("message %d: %v, want ErrNotAttempted", i, err)
		}
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests started", n)
	}
}

func TestSink_CancelledDuringRequestIsTransient(t *testing.T) {
	e := newEndpoint(t, 1)
	arrived := hang(e)
	s := newSink(t, e, func(c *webhook.Config) { c.Timeout = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan []error, 1)
	go func() { result <- s.Deliver(ctx, sinktest.Messages(t, 1)) }()
	select {
	case <-arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the request did not arrive")
	}
	cancel()
	select {
	case errs := <-result:
		err := errs[0]
		if err == nil || sinks.IsPermanent(err) || errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("cancelled mid-request: %v, want a transient error", err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled mid-request: %v, want it to wrap context.Canceled (the relay releases such rows at shutdown)", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Deliver did not return after its context was cancelled")
	}
	if err := s.Available(); err != nil {
		t.Errorf("a cancelled request counted against the endpoint: %v", err)
	}
}

func TestSink_ConcurrencyIsBoundedAcrossDeliverCalls(t *testing.T) {
	e := newEndpoint(t, 1)
	release := make(chan struct{})
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		select {
		case <-release:
		case <-e.Done():
		}
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	const limit = 3
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency, c.SlowAfter = limit, time.Hour })
	msgs := sinktest.Messages(t, 40)
	var wg sync.WaitGroup
	errs := make([][]error, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for g := range 4 {
		wg.Go(func() { errs[g] = s.Deliver(ctx, msgs[g*10:(g+1)*10]) })
	}
	inFlight := e.InFlight
	waitfor.Condition(t, 15*time.Second, "requests to fill the limit", func() bool { return inFlight() >= limit })
	// Watch for a while whether more requests than the limit come in
	// while these are held.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if n := inFlight(); n > limit {
			t.Fatalf("%d requests in flight, limit %d", n, limit)
		}
	}
	close(release)
	wg.Wait()
	for g := range errs {
		if len(errs[g]) != 10 {
			t.Fatalf("Deliver %d: %d outcomes for 10 messages", g, len(errs[g]))
		}
		for i, err := range errs[g] {
			if err != nil {
				t.Errorf("Deliver %d, message %d: %v", g, i, err)
			}
		}
	}
	if e.MaxInFlight() != limit {
		t.Errorf("at most %d requests were in flight at once, want the limit %d", e.MaxInFlight(), limit)
	}
}

func TestSink_CircuitBreaker(t *testing.T) {
	e := newEndpoint(t, 1)
	var down atomic.Bool
	down.Store(true)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if down.Load() {
			// Close the connection without a response.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return 0
			}
			_ = conn.Close()
			return -1
		}
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency = 1 })

	errs := deliver(t, s, sinktest.Messages(t, 8))
	// The breaker opened after the fifth request failed, so not before it
	// arrived: its pause ends at least a second after that. (The client can
	// see the closed connection before the receiver has recorded it.)
	waitfor.Condition(t, 15*time.Second, "the receiver to record 5 requests", func() bool { return len(e.Requests()) >= 5 })
	opened := e.Requests()[4].At
	for i, err := range errs {
		notAttempted := errors.Is(err, sinks.ErrNotAttempted)
		switch {
		case err == nil, sinks.IsPermanent(err):
			t.Errorf("message %d: %v, want a transient error", i, err)
		case i < 5 && notAttempted:
			t.Errorf("message %d: %v; the breaker opened before 5 failures", i, err)
		case i >= 5 && !notAttempted:
			t.Errorf("message %d: %v; want ErrNotAttempted once the breaker is open", i, err)
		}
	}
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "circuit breaker") {
		t.Fatalf("Available with the breaker open: %v", err)
	}
	sent := len(e.Requests())
	for i, err := range deliver(t, s, sinktest.Messages(t, 3)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("message %d while the breaker is open: %v, want ErrNotAttempted", i, err)
		}
	}
	if n := len(e.Requests()); n != sent {
		t.Errorf("%d requests sent while the breaker was open", n-sent)
	}

	waitfor.Condition(t, 15*time.Second, "the breaker's first pause to end", func() bool { return s.Available() == nil })
	if waited := time.Since(opened); waited < time.Second {
		t.Errorf("the first pause lasted %s, want 1s", waited)
	}
	// Still down: the first failure after a pause opens the breaker
	// again, for twice as long.
	if err := deliverOne(t, s, message(t, nil)); err == nil || errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("after the pause: %v, want a transient error", err)
	}
	if err := s.Available(); err == nil || !strings.Contains(err.Error(), "open for 2s") {
		t.Errorf("Available after a failure following the pause: %v, want the breaker open for 2s", err)
	}

	down.Store(false)
	waitfor.Condition(t, 15*time.Second, "the breaker's second pause to end", func() bool { return s.Available() == nil })
	if err := deliverOne(t, s, message(t, nil)); err != nil {
		t.Fatalf("endpoint back: %v", err)
	}
	// A response closed the breaker: one failure no longer pauses.
	down.Store(true)
	if err := deliverOne(t, s, message(t, nil)); err == nil || errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("one failure after recovery: %v, want a transient error", err)
	}
	if err := s.Available(); err != nil {
		t.Errorf("one failure after recovery paused the sink: %v", err)
	}
}

func TestSink_ClosedSendsNothing(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("Available after Close: %v", err)
	}
	if err := deliverOne(t, s, message(t, nil)); !errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("Deliver after Close: %v", err)
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests after Close", n)
	}
}

func TestSink_LogsNoPayloadsOrSecrets(t *testing.T) {
	e := newEndpoint(t, 1)
	var status atomic.Int32
	status.Store(http.StatusTooManyRequests)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte("body"))
		return int(status.Load())
	})
	log, logs := testlog.New(t, slog.LevelDebug)
	url := strings.Replace(e.Server.URL, "http://", "http://alice:pa55word@", 1) + "/hook?token=t0ken"
	s := newSink(t, e, func(c *webhook.Config) {
		c.URL = url
		c.Logger = log
		c.Concurrency = 1
	})
	msgs := sinktest.Messages(t, 3)
	for i := range msgs {
		msgs[i].Payload = []byte(`{"card": "PAYLOAD-MARKER"}`)
	}
	var errs []error
	errs = append(errs, deliver(t, s, msgs)...)
	status.Store(http.StatusInternalServerError)
	errs = append(errs, deliver(t, s, msgs)...)
	// And a breaker opening, which logs.
	dead := newSink(t, e, func(c *webhook.Config) {
		c.URL = "http://alice:pa55word@127.0.0.1:1/hook?token=t0ken"
		c.Logger = log
		c.Concurrency = 1
	})
	errs = append(errs, deliver(t, dead, msgs)...)
	errs = append(errs, deliver(t, dead, sinktest.Messages(t, 3))...)
	errs = append(errs, dead.Available())
	out := logs.String()
	for _, err := range errs {
		// Error texts are logged by the relay and stored with rows.
		if err != nil && (strings.Contains(err.Error(), "pa55word") || strings.Contains(err.Error(), "t0ken")) {
			t.Errorf("error %q shows the URL's credentials", err)
		}
	}
	if !strings.Contains(out, "not responding") {
		t.Errorf("the breaker opening was not logged:\n%s", out)
	}
	for _, secret := range []string{"PAYLOAD-MARKER", "pa55word", "t0ken", strings.TrimPrefix(e.Secrets[0], "whsec_")} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs show %q:\n%s", secret, out)
		}
	}
}

func TestSink_ASlowRequestGivesItsSlotUp(t *testing.T) {
	e := newEndpoint(t, 1)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if r.Header.Get("x-hang") != "" {
			return e.Hang(r)
		}
		return 0
	})
	s := newSink(t, e, func(c *webhook.Config) {
		c.Concurrency, c.SlowAfter, c.Timeout = 1, 100*time.Millisecond, 3*time.Second
	})
	msgs := sinktest.Messages(t, 11)
	msgs[0].Headers = map[string]string{"x-hang": "1"}
	var mu sync.Mutex
	var order []int
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.DeliverStream(ctx, msgs, func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, i)
		if (i == 0) != (err != nil) {
			t.Errorf("message %d: %v", i, err)
		}
	})
	if len(order) != 11 || order[10] != 0 {
		t.Errorf("outcomes reported in order %v: want the ten others delivered while the hanging request waits, its own last", order)
	}
}
