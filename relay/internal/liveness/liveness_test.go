package liveness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a time that tests set.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// at sets the clock to start + d.
func (c *clock) at(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(d)
}

// step is what one loop does at a time after the start.
type step struct {
	at   time.Duration
	loop string
	op   string // start, beat, wait, done
}

// play runs steps on m, setting c, and returns the loops by name.
func play(t *testing.T, m *Monitor, c *clock, steps []step) {
	t.Helper()
	loops := map[string]*Loop{}
	for _, s := range steps {
		c.at(s.at)
		switch s.op {
		case "start":
			loops[s.loop] = m.Start(s.loop)
		case "beat":
			loops[s.loop].Beat()
		case "wait":
			loops[s.loop].Wait()
		case "done":
			loops[s.loop].Done()
		default:
			t.Fatalf("unknown op %q", s.op)
		}
	}
}

func TestCheck(t *testing.T) {
	const threshold = 2 * time.Minute
	tests := []struct {
		name  string
		steps []step
		check time.Duration
		// stuck are the parts the error names, in order; none: live.
		stuck []string
	}{
		{name: "no loop", check: time.Hour},
		{
			name:  "started: working, within the threshold",
			steps: []step{{0, "claim", "start"}},
			check: threshold,
		},
		{
			name:  "started and never came round",
			steps: []step{{0, "claim", "start"}},
			check: threshold + time.Second,
			stuck: []string{"claim for 2m1s"},
		},
		{
			name:  "beats often: live however long it runs",
			steps: []step{{0, "claim", "start"}, {time.Minute, "claim", "beat"}, {2 * time.Minute, "claim", "beat"}, {3 * time.Minute, "claim", "beat"}},
			check: 4 * time.Minute,
		},
		{
			name:  "a long wait (idle, an outage's backoff, a drain) is not a stall",
			steps: []step{{0, "settle", "start"}, {0, "settle", "wait"}},
			check: 24 * time.Hour,
		},
		{
			name:  "beat after a long wait, then works too long",
			steps: []step{{0, "settle", "start"}, {0, "settle", "wait"}, {time.Hour, "settle", "beat"}},
			check: time.Hour + threshold + 30*time.Second,
			stuck: []string{"settle for 2m30s"},
		},
		{
			name:  "beat after a long wait, working within the threshold",
			steps: []step{{0, "settle", "start"}, {0, "settle", "wait"}, {time.Hour, "settle", "beat"}},
			check: time.Hour + threshold,
		},
		{
			name:  "a loop that ended is not followed",
			steps: []step{{0, "heartbeat", "start"}, {time.Second, "heartbeat", "done"}},
			check: time.Hour,
		},
		{
			name: "only the stuck loops are named, by name",
			steps: []step{
				{0, "settle loop 1", "start"}, {0, "claim loop 2", "start"}, {0, "claim loop 1", "start"}, {0, "heartbeat", "start"},
				{time.Minute, "claim loop 2", "beat"}, {time.Minute, "heartbeat", "wait"},
				{2 * time.Minute, "claim loop 1", "beat"}, {3 * time.Minute, "claim loop 1", "beat"},
			},
			check: 4 * time.Minute,
			stuck: []string{"claim loop 2 for 3m0s", "settle loop 1 for 4m0s"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			m := New(Config{Threshold: threshold, Now: c.Now})
			play(t, m, c, tt.steps)
			c.at(tt.check)
			err := m.Check()
			if len(tt.stuck) == 0 {
				if err != nil {
					t.Fatalf("Check() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check() = nil, want the stuck loops %q", tt.stuck)
			}
			want := "stuck: " + strings.Join(tt.stuck, ", ") + " without coming round (the limit is 2m0s)"
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Check() = %q, want it to begin %q", err, want)
			}
		})
	}
}

// Run reports a stall once when it begins and once when it ends, whether
// the loop beats again, waits or ends.
func TestReport(t *testing.T) {
	const threshold = time.Minute
	for _, end := range []string{"beat", "wait", "done"} {
		t.Run(end, func(t *testing.T) {
			c := newClock()
			var events []string
			m := New(Config{Threshold: threshold, Now: c.Now, Hooks: Hooks{
				Stuck:     func(loop string, d time.Duration) { events = append(events, fmt.Sprintf("stuck %s %s", loop, d)) },
				Recovered: func(loop string, d time.Duration) { events = append(events, fmt.Sprintf("recovered %s %s", loop, d)) },
			}})
			reported := map[*Loop]time.Time{}
			l := m.Start("claim")
			other := m.Start("settle")
			other.Wait()
			for _, at := range []time.Duration{30 * time.Second, 61 * time.Second, 90 * time.Second, 2 * time.Minute} {
				c.at(at)
				m.report(reported)
			}
			c.at(150 * time.Second)
			switch end {
			case "beat":
				l.Beat()
			case "wait":
				l.Wait()
			case "done":
				l.Done()
			}
			c.at(160 * time.Second)
			m.report(reported)
			m.report(reported)
			recovered := "recovered claim 2m30s"
			if end != "beat" {
				recovered = "recovered claim 2m40s" // learned at the report
			}
			want := []string{"stuck claim 1m1s", recovered}
			if fmt.Sprint(events) != fmt.Sprint(want) {
				t.Errorf("hooks heard %q, want %q", events, want)
			}
		})
	}
}

// A loop stuck again after it recovered is reported again.
func TestReport_EachStallOnce(t *testing.T) {
	c := newClock()
	stuck := 0
	m := New(Config{Threshold: time.Minute, Now: c.Now, Hooks: Hooks{Stuck: func(string, time.Duration) { stuck++ }}})
	reported := map[*Loop]time.Time{}
	l := m.Start("heartbeat")
	c.at(2 * time.Minute)
	m.report(reported)
	l.Beat()
	m.report(reported)
	c.at(4 * time.Minute)
	m.report(reported)
	m.report(reported)
	if stuck != 2 {
		t.Errorf("Stuck called %d times for two stalls, want 2", stuck)
	}
}

// Run returns when its context ends.
func TestRun_EndsWithItsContext(t *testing.T) {
	m := New(Config{Threshold: time.Minute, Every: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	cancel()
	<-done
}

// Loops beat, wait and end concurrently with checks (run with -race).
func TestConcurrentUse(t *testing.T) {
	m := New(Config{Threshold: time.Minute})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			l := m.Start(fmt.Sprintf("loop %d", i))
			defer l.Done()
			for range 1000 {
				l.Beat()
				l.Wait()
			}
		})
	}
	wg.Go(func() {
		for range 1000 {
			if err := m.Check(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
}

func TestNew_RefusesANonPositiveThreshold(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with a zero threshold did not panic")
		}
	}()
	New(Config{})
}
