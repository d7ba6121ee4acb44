package relay

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Loud about what blocks delivery: when a sink becomes unavailable, stops
// delivering while connected, or claims start failing, the relay logs one
// error line with the reason, then a reminder at a growing interval while
// it lasts (reminder), and a line when it recovers.

// reminder says when to log again that a problem persists: after 30s, then
// twice as long each time, at most every 10 minutes.
type reminder struct {
	since time.Time // when the problem began; zero while there is none
	next  time.Time
	every time.Duration
}

const (
	reminderFirst = 30 * time.Second
	reminderMax   = 10 * time.Minute
)

// begin starts a problem at now and reports whether it is new.
func (m *reminder) begin(now time.Time) bool {
	if !m.since.IsZero() {
		return false
	}
	m.since, m.every = now, reminderFirst
	m.next = now.Add(m.every)
	return true
}

// remindNow reports whether a reminder is remindNow at now, and schedules the next.
func (m *reminder) remindNow(now time.Time) bool {
	if m.since.IsZero() || now.Before(m.next) {
		return false
	}
	m.every = min(2*m.every, reminderMax)
	m.next = now.Add(m.every)
	return true
}

// end ends the problem and returns how long it lasted (0 when there was
// none).
func (m *reminder) end(now time.Time) time.Duration {
	if m.since.IsZero() {
		return 0
	}
	d := now.Sub(m.since)
	*m = reminder{}
	return d
}

// sinkWatch follows one sink: its availability and whether its deliveries
// succeed. It is safe for concurrent use.
type sinkWatch struct {
	// stallAfter is how long a connected sink may go without delivering
	// while its deliveries fail before it counts as stalled
	// (Config.StallAfter).
	stallAfter time.Duration

	mu          sync.Mutex
	unavailable reminder
	// unavailableReported says the current outage was logged.
	unavailableReported bool
	lastReason          string

	// lastUnavailable is when the sink was last seen unavailable.
	lastUnavailable time.Time

	lastSuccess time.Time
	failing     reminder // deliveries fail and none succeeds
	failures    int
	lastErr     string
	stalled     bool
}

// unavailableGrace is how long a sink may be unavailable before it is
// reported: a connection still being made as the relay starts, or
// re-made at once, is not an outage worth an error line.
const unavailableGrace = 500 * time.Millisecond

// available records the sink's availability (err nil when available) and
// returns what to log, if anything: the outage once it has lasted
// unavailableGrace, reminders while it lasts, and its end when it was
// reported.
func (w *sinkWatch) available(now time.Time, err error) (msg string, attrs []any, isErr bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		reported := w.unavailableReported
		w.unavailableReported = false
		if d := w.unavailable.end(now); d > 0 && reported {
			return "sink available again", []any{"unavailable_for", d.Round(time.Second)}, false
		}
		return "", nil, false
	}
	w.lastReason = err.Error()
	w.lastUnavailable = now
	w.unavailable.begin(now)
	if !w.unavailableReported {
		if now.Sub(w.unavailable.since) < unavailableGrace {
			return "", nil, false
		}
		w.unavailableReported = true
		return "sink unavailable: its rows wait in the table, without spending attempts, until it is back", []any{"reason", w.lastReason}, true
	}
	if w.unavailable.remindNow(now) {
		return "sink still unavailable", []any{"unavailable_for", now.Sub(w.unavailable.since).Round(time.Second), "reason", w.lastReason}, true
	}
	return "", nil, false
}

// recordDelivery records a delivery that succeeded; it returns how long the
// sink had recordDelivery nothing when it had been reported stalled.
func (w *sinkWatch) recordDelivery(now time.Time) (stalledFor time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastSuccess = now
	w.failures = 0
	d := w.failing.end(now)
	if !w.stalled {
		return 0
	}
	w.stalled = false
	return d
}

// recordFailure records a delivery that recordFailure (to be retried) and returns what
// to log, if anything: the sink is connected but delivers nothing.
func (w *sinkWatch) recordFailure(now time.Time, err string) (msg string, attrs []any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures++
	// A sink's error may quote the row's topic: keep a bounded part for
	// the log and /readyz.
	err = clip(err, maxLoggedErrBytes)
	w.lastErr = err
	w.failing.begin(now)
	if !w.stalled && now.Sub(w.failing.since) >= w.stallAfter && now.Sub(w.lastSuccess) >= w.stallAfter {
		w.stalled = true
		return "sink delivers nothing: every attempt fails", []any{"for", now.Sub(w.failing.since).Round(time.Second), "num_failed", w.failures, "last_error", err}
	}
	if w.stalled && w.failing.remindNow(now) {
		return "sink still delivers nothing", []any{"for", now.Sub(w.failing.since).Round(time.Second), "num_failed", w.failures, "last_error", err}
	}
	return "", nil
}

// ready returns why the sink is not ready, given its availability now
// (availErr): it is unavailable; it is stalled (connected, but every
// delivery fails); or it was unavailable less than stallAfter ago and its
// last delivery failed. The last keeps a sink whose every request fails
// not ready between the pauses of its circuit breaker, when it is
// available only until its next request fails; a sink back from an outage
// is ready at once when nothing failed, else at its first delivery or
// after stallAfter.
func (w *sinkWatch) ready(now time.Time, availErr error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if availErr != nil {
		w.lastUnavailable = now
		return availErr
	}
	if w.stalled {
		return fmt.Errorf("connected but no delivery succeeded for %s while %d failed (last error: %s)",
			now.Sub(w.failing.since).Round(time.Second), w.failures, w.lastErr)
	}
	if !w.lastUnavailable.IsZero() && !w.failing.since.IsZero() && now.Sub(w.lastUnavailable) < w.stallAfter {
		return fmt.Errorf("unavailable %s ago (%s), and its last delivery failed (%s)",
			now.Sub(w.lastUnavailable).Round(time.Second), w.lastReason, w.lastErr)
	}
	return nil
}

// sinkWatches follow every sink of a relay (a sinkWatch each): the claim
// loops ask which sinks are open for a claim (states), Ready whether every
// one can deliver (ready).
type sinkWatches struct {
	sinks   map[string]sinks.Sink
	watches map[string]*sinkWatch
	log     *slog.Logger
	metrics *Metrics
}

// newSinkWatches returns the watches of cfg's sinks, each as if it had
// just delivered.
func newSinkWatches(cfg *Config, log *slog.Logger) *sinkWatches {
	w := &sinkWatches{sinks: cfg.Sinks, watches: make(map[string]*sinkWatch, len(cfg.Sinks)), log: log, metrics: cfg.Metrics}
	for name := range cfg.Sinks {
		w.watches[name] = &sinkWatch{stallAfter: cfg.StallAfter, lastSuccess: time.Now()}
	}
	return w
}

// forSink returns the watch forSink sink name.
func (w *sinkWatches) forSink(name string) *sinkWatch { return w.watches[name] }

// states splits the sinks into those whose rows must not be claimed now
// (unavailable) and those open for a claim, and records their availability.
func (w *sinkWatches) states() (closed, open []string) {
	closed = []string{}
	for name, s := range w.sinks {
		var err error
		if a, ok := s.(sinks.Availability); ok {
			err = a.Available()
		}
		available := err == nil
		if msg, attrs, isErr := w.watches[name].available(time.Now(), err); msg != "" {
			if isErr {
				w.log.Error(msg, append([]any{"sink", name}, attrs...)...)
			} else {
				w.log.Info(msg, append([]any{"sink", name}, attrs...)...)
			}
		}
		w.metrics.SinkAvailable.WithLabelValues(name).Set(boolGauge(available))
		if available {
			open = append(open, name)
		} else {
			closed = append(closed, name)
		}
	}
	return closed, open
}

// ready returns why a sink cannot deliver now (sinkWatch.ready), naming
// it, or nil when every one can.
func (w *sinkWatches) ready(now time.Time) error {
	for name, s := range w.sinks {
		var available error
		if a, ok := s.(sinks.Availability); ok {
			available = a.Available()
		}
		if err := w.watches[name].ready(now, available); err != nil {
			return fmt.Errorf("sink %s: %w", name, err)
		}
	}
	return nil
}
