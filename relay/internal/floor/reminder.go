package floor

import "time"

// reminder says when to log again that refreshes or rescans keep failing:
// after 30s, then twice as long each time, at most every 10 minutes (the
// relay's reminder, relay/watch.go).
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

// due reports whether a reminder is due at now, and schedules the next.
func (m *reminder) due(now time.Time) bool {
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
