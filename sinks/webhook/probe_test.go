package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// An outage spends attempts only until the sink knows the endpoint is
// down: the breaker's opening failures count, the rest are not attempted,
// and after each pause one request probes the endpoint instead of the
// whole waiting batch.

// outcomes splits errs into the failures that spend an attempt (transient,
// attempted) and those that do not (not attempted), failing t on a
// delivery or a permanent failure.
func outcomes(t *testing.T, errs []error) (spent, notAttempted int) {
	t.Helper()
	for i, err := range errs {
		switch {
		case err == nil, sinks.IsPermanent(err):
			t.Errorf("message %d: %v, want a transient failure", i, err)
		case errors.Is(err, sinks.ErrNotAttempted):
			notAttempted++
		default:
			spent++
		}
	}
	return spent, notAttempted
}

// waitAvailable waits for the sink's pause to end.
func waitAvailable(t *testing.T, s *webhook.Sink) {
	t.Helper()
	waitfor.Condition(t, 40*time.Second, "the pause to end", func() bool { return s.Available() == nil })
}

func TestSink_AfterAPauseOneRequestProbesTheEndpoint(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, 1)
	e.Break(t) // 503 to every request
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency = 8 })

	if spent, _ := outcomes(t, deliver(t, s, sinktest.Messages(t, 8))); spent != 5 {
		t.Errorf("%d messages spent an attempt on the outage, want the 5 whose 503s opened the breaker", spent)
	}
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "circuit breaker") {
		t.Fatalf("Available after 5xx to every request: %v, want the breaker open", err)
	}

	waitAvailable(t, s)
	before := len(e.Requests())
	if spent, _ := outcomes(t, deliver(t, s, sinktest.Messages(t, 8))); spent != 0 {
		t.Errorf("%d messages spent an attempt after the pause; a 503 to the probe is no message's fault", spent)
	}
	if n := len(e.Requests()) - before; n != 1 {
		t.Errorf("%d requests after the pause, want one probe", n)
	}
	if err := s.Available(); err == nil || !strings.Contains(err.Error(), "open for 2s") {
		t.Errorf("Available after the probe failed: %v, want the breaker open for 2s", err)
	}

	e.Repair()
	waitAvailable(t, s)
	for i, err := range deliver(t, s, sinktest.Messages(t, 8)) {
		if err != nil {
			t.Errorf("message %d once the endpoint is back: %v", i, err)
		}
	}
	if err := s.Available(); err != nil {
		t.Errorf("Available once the probe succeeded: %v", err)
	}
}

// Requests in flight when the breaker opens fail after it: the pause
// accounts for them, and they spend no attempt.
func TestSink_RequestsInFlightWhenTheSinkPausesSpendNoAttempt(t *testing.T) {
	e := newEndpoint(t, 1)
	const n = 8
	var arrived atomic.Int32
	all := make(chan struct{})
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-e.Done():
		}
		w.WriteHeader(http.StatusBadGateway)
		return http.StatusBadGateway
	})
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency = n })
	errs := deliver(t, s, sinktest.Messages(t, n))
	spent, notAttempted := outcomes(t, errs)
	if spent != 5 || notAttempted != n-5 {
		t.Errorf("%d spent an attempt and %d did not, want 5 (the failures that opened the breaker) and %d", spent, notAttempted, n-5)
	}
	for _, err := range errs {
		if errors.Is(err, sinks.ErrNotAttempted) && !strings.Contains(err.Error(), "502") {
			t.Errorf("not attempted: %v, want the response it got named", err)
		}
	}
}

// A probe whose failure may be its message's own (a 500: the message may
// crash the receiver) spends its attempt, so that such a message reaches
// the dead letters in the end; the others wait.
func TestSink_AProbeAnswered500SpendsItsAttempt(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, 1)
	e.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		w.WriteHeader(http.StatusInternalServerError)
		return http.StatusInternalServerError
	})
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency = 1 })
	outcomes(t, deliver(t, s, sinktest.Messages(t, 5)))
	waitAvailable(t, s)
	if spent, notAttempted := outcomes(t, deliver(t, s, sinktest.Messages(t, 3))); spent != 1 || notAttempted != 2 {
		t.Errorf("after the pause %d spent an attempt and %d did not, want the probe's only", spent, notAttempted)
	}
}

// A probe that was never sent (the connection is refused) spends nothing.
func TestSink_AProbeRefusedAConnectionSpendsNothing(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, 1)
	s := newSink(t, e, func(c *webhook.Config) {
		c.URL = "http://127.0.0.1:1/hooks/outbox" // nothing listens on port 1
		c.Concurrency = 1
	})
	if spent, _ := outcomes(t, deliver(t, s, sinktest.Messages(t, 6))); spent != 5 {
		t.Errorf("%d refused requests spent an attempt, want the 5 that opened the breaker", spent)
	}
	waitAvailable(t, s)
	err := deliverOne(t, s, message(t, nil))
	if !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("the probe: %v, want not attempted, naming the refused connection", err)
	}
}

// A message the endpoint refuses on its own (503 for one kind of event)
// does not probe again while other messages wait: the probes go round.
func TestSink_ProbesGoRoundTheWaitingMessages(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, 1)
	e.Break(t)
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency = 1 })
	outcomes(t, deliver(t, s, sinktest.Messages(t, 5)))
	waiting := sinktest.Messages(t, 3)
	var probes []string
	for range 3 {
		waitAvailable(t, s)
		outcomes(t, deliver(t, s, waiting))
		reqs := e.Requests()
		probes = append(probes, reqs[len(reqs)-1].ID())
	}
	for i, m := range waiting {
		if probes[i] != m.IdempotencyKey {
			t.Errorf("probe %d was %s, want each waiting message in turn (%s)", i+1, probes[i], m.IdempotencyKey)
		}
	}
}

// A 5xx for some messages among successes is theirs: it spends their
// attempts and does not pause the sink.
func TestSink_ServerErrorsAmongSuccessesDoNotPauseTheSink(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, func(c *webhook.Config) { c.Concurrency = 1 })
	msgs := sinktest.Messages(t, 20)
	for i := range msgs {
		if i%3 != 0 {
			msgs[i].Headers = map[string]string{"x-test-status": "500"}
		}
	}
	for i, err := range deliver(t, s, msgs) {
		if (i%3 == 0) != (err == nil) || errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if err := s.Available(); err != nil {
		t.Errorf("Available: %v, want no pause", err)
	}
}
