package relay

import (
	"testing"
	"time"
)

// TestClaimPacer_LoopsTakeTurns: two loops claiming the same rows, started
// in step, each claim lasting 1 ms. After a few rounds the claims of
// the two alternate every/2 apart, and neither loop claims more often than
// every: the longest wait for a claim is halved, the claims per second stay.
func TestClaimPacer_LoopsTakeTurns(t *testing.T) {
	const every = 5 * time.Millisecond
	p := newClaimPacer([]claimer{{what: "rows"}, {what: "rows"}, {what: "rows without a key"}})
	t0 := time.Unix(0, 0)
	next := []time.Time{t0, t0.Add(100 * time.Microsecond)} // in step
	var starts []time.Time
	for range 20 {
		i := 0
		if next[1].Before(next[0]) {
			i = 1
		}
		start := next[i]
		p.claimStarted("rows", start)
		starts = append(starts, start)
		now := start.Add(time.Millisecond) // the claim's round trip
		next[i] = now.Add(p.afterRows("rows", start, now, every))
		if next[i].Sub(start) < every {
			t.Fatalf("loop %d claims again %s after its claim began, less than %s", i, next[i].Sub(start), every)
		}
	}
	for k := 8; k < len(starts); k++ {
		if gap := starts[k].Sub(starts[k-1]); gap != every/2 {
			t.Errorf("claim %d began %s after the one before, want %s (the loops take turns)", k, gap, every/2)
		}
	}
	// A loop alone on its rows is paced by its own claims only.
	start := t0.Add(time.Second)
	if d := p.afterRows("rows without a key", start, start.Add(time.Millisecond), every); d != every-time.Millisecond {
		t.Errorf("a lone loop waits %s after a 1 ms claim, want %s", d, every-time.Millisecond)
	}
}

// TestClaimPacer_EarlyClaimsDoNotPushThePlansAhead: loops woken before
// their plans (a notification on every insert, a settle in ordered mode)
// claim back to back for a minute; once the wake-ups stop, a loop waits no
// longer than every, as if it had never been woken early.
func TestClaimPacer_EarlyClaimsDoNotPushThePlansAhead(t *testing.T) {
	const every = 5 * time.Millisecond
	p := newClaimPacer([]claimer{{what: "rows"}, {what: "rows"}})
	now := time.Unix(0, 0)
	for range 60000 { // a claim a millisecond, each 0.5 ms long
		start := now
		p.claimStarted("rows", start)
		now = start.Add(500 * time.Microsecond)
		if d := p.afterRows("rows", start, now, every); d > every {
			t.Fatalf("after %s of early claims a loop would wait %s, more than %s", now.Sub(time.Unix(0, 0)), d, every)
		}
		now = now.Add(500 * time.Microsecond) // woken early
	}
}

// TestClaimPacer_RowsFoundAreSharedByTheLoopsOfOneKind: rows one loop found
// tell the other loop of the same rows that a stream flows, not a loop of
// other rows, and only after the moment asked about.
func TestClaimPacer_RowsFoundAreSharedByTheLoopsOfOneKind(t *testing.T) {
	p := newClaimPacer([]claimer{{what: "rows"}, {what: "rows"}, {what: "rows without a key"}})
	at := time.Unix(100, 0)
	if p.foundSince("rows", at.Add(-time.Hour)) {
		t.Error("rows found before any claim found some")
	}
	p.rowsFound("rows", at)
	p.rowsFound("rows", at.Add(-time.Second)) // a claim that ended later, begun earlier
	switch {
	case !p.foundSince("rows", at.Add(-50*time.Millisecond)):
		t.Error("rows found 50 ms after the moment asked about are not seen")
	case p.foundSince("rows", at):
		t.Error("rows found at the moment asked about count as found after it")
	case p.foundSince("rows without a key", at.Add(-time.Hour)):
		t.Error("rows of one kind found count for another kind")
	}
}
