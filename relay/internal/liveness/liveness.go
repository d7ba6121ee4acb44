package liveness

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Hooks report stalls as Run finds them. Every field is optional.
type Hooks struct {
	// Stuck learns, once per stall, that loop has worked for longer than
	// the threshold without a beat: for how long so far.
	Stuck func(loop string, stuckFor time.Duration)
	// Recovered learns that a loop reported stuck beat again, waits, or
	// ended, and how long it went without a beat (up to Config.Every more
	// when it waits or ended).
	Recovered func(loop string, stuckFor time.Duration)
}

// Config configures a Monitor.
type Config struct {
	// Threshold is how long a loop may work without a beat before it is
	// stuck. Required.
	Threshold time.Duration
	// Every is how often Run looks for stalls. Default Threshold / 4.
	Every time.Duration
	// Now returns the current time. Default time.Now.
	Now func() time.Time
	// Hooks report the stalls Run finds.
	Hooks Hooks
}

// Monitor follows the loops of one engine. Its methods, and its Loops',
// are safe for concurrent use.
type Monitor struct {
	cfg Config

	mu    sync.Mutex
	loops map[*Loop]struct{}
}

// New returns a monitor that follows no loop yet. It panics when
// cfg.Threshold is not positive: the threshold is the engine's own
// setting, never a user's as it is.
func New(cfg Config) *Monitor {
	if cfg.Threshold <= 0 {
		panic(fmt.Sprintf("liveness: threshold %s is not positive", cfg.Threshold))
	}
	cfg.Every = cmp.Or(cfg.Every, cfg.Threshold/4)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &cfg.Hooks
	if h.Stuck == nil {
		h.Stuck = func(string, time.Duration) {}
	}
	if h.Recovered == nil {
		h.Recovered = func(string, time.Duration) {}
	}
	return &Monitor{cfg: cfg, loops: map[*Loop]struct{}{}}
}

// Threshold returns how long a loop may work without a beat.
func (m *Monitor) Threshold() time.Duration { return m.cfg.Threshold }

// waiting is a Loop's beat while it waits.
const waiting = math.MinInt64

// Loop is one loop that m follows, from Start to Done.
type Loop struct {
	m    *Monitor
	name string
	// beat is when the loop last beat, in Unix nanoseconds, or waiting.
	beat atomic.Int64
}

// Start follows a new loop, named name in Check's error and the hooks,
// which is working from now on: it must Beat, Wait or be Done within the
// threshold.
func (m *Monitor) Start(name string) *Loop {
	l := &Loop{m: m, name: name}
	l.Beat()
	m.mu.Lock()
	m.loops[l] = struct{}{}
	m.mu.Unlock()
	return l
}

// Beat records that the loop came round: it works from now on, and must
// beat again (or Wait) within the threshold.
func (l *Loop) Beat() { l.beat.Store(l.m.cfg.Now().UnixNano()) }

// Wait records that the loop waits for what comes by itself (a timer,
// work from another loop, its context's end): it is not stuck, however
// long it waits, until it beats again.
func (l *Loop) Wait() { l.beat.Store(waiting) }

// Done stops following the loop: it has ended.
func (l *Loop) Done() {
	l.Wait()
	l.m.mu.Lock()
	delete(l.m.loops, l)
	l.m.mu.Unlock()
}

// stall is a loop found stuck: since when it has not beaten.
type stall struct {
	loop  *Loop
	since time.Time
}

// stalls returns the loops stuck at now, by name.
func (m *Monitor) stalls(now time.Time) []stall {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []stall
	for l := range m.loops {
		b := l.beat.Load()
		if b == waiting {
			continue
		}
		if since := time.Unix(0, b); now.Sub(since) > m.cfg.Threshold {
			out = append(out, stall{loop: l, since: since})
		}
	}
	slices.SortFunc(out, func(a, b stall) int { return strings.Compare(a.loop.name, b.loop.name) })
	return out
}

// Check returns nil while every loop followed waits or has beaten within
// the threshold, and otherwise an error that names the stuck loops and how
// long each has gone without a beat.
func (m *Monitor) Check() error {
	now := m.cfg.Now()
	stuck := m.stalls(now)
	if len(stuck) == 0 {
		return nil
	}
	parts := make([]string, len(stuck))
	for i, s := range stuck {
		parts[i] = fmt.Sprintf("%s for %s", s.loop.name, now.Sub(s.since).Round(time.Second))
	}
	return fmt.Errorf("stuck: %s without coming round (the limit is %s); a restart is needed",
		strings.Join(parts, ", "), m.cfg.Threshold)
}

// Run looks for stalls every Config.Every until ctx ends, and reports each
// through the hooks: Stuck once when it is found, Recovered once it is
// over.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Every)
	defer t.Stop()
	reported := map[*Loop]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.report(reported)
	}
}

// report calls the hooks for the stalls that began or ended since the
// last report, which reported holds (by loop, the stall's start).
func (m *Monitor) report(reported map[*Loop]time.Time) {
	now := m.cfg.Now()
	stuck := m.stalls(now)
	for _, s := range stuck {
		if since, ok := reported[s.loop]; ok && since.Equal(s.since) {
			continue
		}
		reported[s.loop] = s.since
		m.cfg.Hooks.Stuck(s.loop.name, now.Sub(s.since))
	}
	for l, since := range reported {
		if !slices.ContainsFunc(stuck, func(s stall) bool { return s.loop == l && s.since.Equal(since) }) {
			delete(reported, l)
			until := now // it waits, or ended: at the latest now
			if b := l.beat.Load(); b != waiting {
				until = time.Unix(0, b)
			}
			m.cfg.Hooks.Recovered(l.name, until.Sub(since))
		}
	}
}
