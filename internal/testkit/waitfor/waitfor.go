// Package waitfor is how tests wait: poll a condition with a deadline,
// never sleep a guessed amount.
package waitfor

import (
	"testing"
	"time"
)

// pollEvery is the pause between two checks of a condition.
const pollEvery = 20 * time.Millisecond

// minTimeout is the shortest wait: a timeout bounds how long a failing test
// takes to say so, it does not measure anything, and a machine that runs
// other work beside the suite can be many times slower than an idle one.
const minTimeout = 30 * time.Second

// Condition polls cond until it holds, failing t after timeout (at least
// 30 seconds) with what it was waiting for.
func Condition(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = max(timeout, minTimeout)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
}

// Count waits until get reaches want and fails t if it went past it: for
// counters that are updated just after the change a test observed (the
// relay counts outcomes right after their settle commits).
func Count(t testing.TB, timeout time.Duration, what string, get func() float64, want float64) {
	t.Helper()
	Condition(t, timeout, what, func() bool { return get() >= want })
	if got := get(); got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
