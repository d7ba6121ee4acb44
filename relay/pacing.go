package relay

import (
	"sync"
	"time"
)

// claimPacer spaces the claims of a relay's loops that claim the same rows
// (claimer.what) while rows trickle in. After a claim that found some rows
// but not a full batch, a loop claims again a tenth of PollInterval later
// (every); two loops that do so each on its own clock drift in and out of
// step, and when in step a row that commits just after their claims waits
// the whole interval, which is what sets the commit-to-ack p99 of a steady
// stream. Paced, each loop still claims once per every, but the loops take
// turns: a loop's next claim comes every/n after the latest claim any of
// them began or has planned (n loops), and no sooner than every after its
// own last claim began (nor later than every after the claim ended). The
// claims per second stay what they were; the longest wait for one is
// halved with two loops. It also records when a claim of each kind last
// found rows (rowsFound), which tells the loops a stream flows
// (claimLoops.eager).
type claimPacer struct {
	mu sync.Mutex
	// loops is how many loops claim each kind of rows, and last the
	// latest start of a claim of that kind, begun or planned.
	loops map[string]int
	last  map[string]time.Time
	// found is when a claim of each kind last found rows.
	found map[string]time.Time
}

// newClaimPacer returns a pacer for the loops cs.
func newClaimPacer(cs []claimer) *claimPacer {
	p := &claimPacer{loops: map[string]int{}, last: map[string]time.Time{}, found: map[string]time.Time{}}
	for _, c := range cs {
		p.loops[c.what]++
	}
	return p
}

// claimStarted records that a loop began a claim of rows what at t.
func (p *claimPacer) claimStarted(what string, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.After(p.last[what]) {
		p.last[what] = t
	}
}

// rowsFound records that a claim of rows what found some at t.
func (p *claimPacer) rowsFound(what string, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.After(p.found[what]) {
		p.found[what] = t
	}
}

// foundSince reports whether a claim of rows what found some after t:
// whichever loop took them, a stream flows.
func (p *claimPacer) foundSince(what string, t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.found[what].After(t)
}

// afterRows returns how long a loop waits, at now, after its claim of rows
// what that began at start found some rows but not a full batch: until
// every/n after the latest claim of those rows begun or planned, and at
// least until every after start, but never longer than every; and plans
// its next claim then. The cap keeps the plans near the clock when loops
// claim before their plans (a notification or a settle ends a pause
// early): planning each claim every/n after the last plan would otherwise
// run ahead of the clock with every early claim, and the pause after the
// last notification would grow with the stream's length.
func (p *claimPacer) afterRows(what string, start, now time.Time, every time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := start.Add(every)
	if n := p.loops[what]; n > 1 {
		if turn := p.last[what].Add(every / time.Duration(n)); turn.After(next) {
			next = turn
		}
	}
	if latest := now.Add(every); next.After(latest) {
		next = latest
	}
	p.last[what] = next
	return max(next.Sub(now), 0)
}
