package sharedcount_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/internal/sharedcount"
)

// relay is one relay's side of the protocol in these tests: what it
// counted and what it used.
type relay struct {
	cfg     sharedcount.Config
	counts  atomic.Int64
	failing atomic.Bool
	mu      sync.Mutex
	used    []use
}

type use struct {
	readings string
	age      time.Duration
	own      bool
}

func newRelay(db *dbtest.Schema, id string, interval time.Duration) *relay {
	return &relay{cfg: sharedcount.Config{Pool: db.Pool, Table: db.Table("gauge_readings"), Relay: id, Interval: interval}}
}

func (r *relay) hooks() sharedcount.Hooks {
	return sharedcount.Hooks{
		Count: func(context.Context) ([]byte, error) {
			if r.failing.Load() {
				return nil, errors.New("the count failed")
			}
			n := r.counts.Add(1)
			return fmt.Appendf(nil, `{"n": %d, "by": %q}`, n, r.cfg.Relay), nil // as jsonb prints it
		},
		Use: func(_ context.Context, readings []byte, age time.Duration, own bool) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.used = append(r.used, use{string(readings), age, own})
			return nil
		},
		Failed: func(error) {},
	}
}

func (r *relay) round(t *testing.T) error {
	t.Helper()
	cfg := r.cfg
	cfg.Hooks = r.hooks()
	return sharedcount.New(cfg).Round(context.Background())
}

func (r *relay) last(t *testing.T) use {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.used) == 0 {
		t.Fatalf("%s used no readings", r.cfg.Relay)
	}
	return r.used[len(r.used)-1]
}

// Four relays whose rounds come at once count once between them, and the
// other three use that count; within nine tenths of an interval nobody
// counts again; after it, the next round counts again.
func TestRound_FourRelaysCountOncePerInterval(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	const interval = 2 * time.Second
	relays := make([]*relay, 4)
	for i := range relays {
		relays[i] = newRelay(db, fmt.Sprintf("relay-%d", i+1), interval)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range relays {
		wg.Go(func() {
			if err := r.round(t); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	firstEnded := time.Now() // the count began before this
	var counted int64
	var counter *relay
	for _, r := range relays {
		counted += r.counts.Load()
		if r.counts.Load() == 1 {
			counter = r
		}
	}
	if counted != 1 || counter == nil {
		t.Fatalf("four relays' first rounds counted %d times, want once", counted)
	}
	want := fmt.Sprintf(`{"n": 1, "by": %q}`, counter.cfg.Relay)
	for _, r := range relays {
		u := r.last(t)
		if u.readings != want || u.own != (r == counter) {
			t.Errorf("%s used %+v, want %s (own: %v)", r.cfg.Relay, u, want, r == counter)
		}
	}

	// Rounds within the interval use the readings.
	for _, r := range relays {
		if err := r.round(t); err != nil {
			t.Fatal(err)
		}
		if u := r.last(t); time.Since(start) < interval*8/10 && (u.own || u.readings != want || u.age <= 0 || u.age > time.Since(start)) {
			t.Errorf("%s's second round used %+v, want the first count's readings, younger than %s", r.cfg.Relay, u, time.Since(start))
		}
	}
	if counted := relays[0].counts.Load() + relays[1].counts.Load() + relays[2].counts.Load() + relays[3].counts.Load(); counted != 1 && time.Since(firstEnded) < interval*8/10 {
		t.Errorf("rounds within the interval counted again: %d counts", counted)
	}

	// An interval after the count began, the next round counts.
	time.Sleep(time.Until(firstEnded.Add(interval)))
	if err := relays[3].round(t); err != nil {
		t.Fatal(err)
	}
	if u := relays[3].last(t); !u.own {
		t.Errorf("relay-4's round an interval later used %+v, want a count of its own", u)
	}
}

// A count that fails gives the turn back at once; a relay that took the
// turn and never stored its readings (it died) keeps it for an interval,
// and then another relay counts.
func TestRound_AFailedOrAbandonedCountLetsAnotherCount(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	const interval = time.Second
	a, b := newRelay(db, "relay-a", interval), newRelay(db, "relay-b", interval)

	a.failing.Store(true)
	if err := a.round(t); err == nil {
		t.Fatal("a failed count reported no error")
	}
	if err := b.round(t); err != nil {
		t.Fatal(err)
	}
	if u := b.last(t); !u.own || b.counts.Load() != 1 {
		t.Fatalf("after relay-a's count failed, relay-b's round used %+v, want a count of its own", u)
	}

	// relay-a takes the turn and dies before it stores anything (its turn
	// here is 3 s, not three intervals: the test waits it out).
	time.Sleep(interval)
	const turn = 3 * time.Second
	var took bool
	if err := db.Pool.QueryRow(context.Background(), "UPDATE "+db.Table("gauge_readings")+
		" SET counting_until = now() + interval '3 seconds', counted_by = 'relay-a' WHERE counted_at <= now() - interval '0.9 second' RETURNING true").Scan(&took); err != nil {
		t.Fatalf("relay-a takes the turn: %v", err)
	}
	tookAt := time.Now()
	before := b.counts.Load()
	if err := b.round(t); err != nil { // waits for the stale readings? no: they exist
		t.Fatal(err)
	}
	if u := b.last(t); time.Since(tookAt) < turn && (u.own || b.counts.Load() != before || u.age < interval) {
		t.Errorf("while relay-a holds the turn relay-b used %+v, want the stored readings, over %s old", u, interval)
	}
	time.Sleep(time.Until(tookAt.Add(turn)))
	if err := b.round(t); err != nil {
		t.Fatal(err)
	}
	if u := b.last(t); !u.own {
		t.Errorf("once relay-a's turn ran out relay-b used %+v, want a count of its own", u)
	}
}

// Relays that start together on a new schema wait for the first count
// rather than count the same rows again.
func TestRound_TheFirstCountIsAwaited(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	const interval = 2 * time.Second
	a, b := newRelay(db, "relay-a", interval), newRelay(db, "relay-b", interval)
	counting := make(chan struct{})
	release := make(chan struct{})
	hooks := a.hooks()
	count := hooks.Count
	hooks.Count = func(ctx context.Context) ([]byte, error) {
		close(counting)
		<-release
		return count(ctx)
	}
	done := make(chan error, 1)
	cfg := a.cfg
	cfg.Hooks = hooks
	go func() { done <- sharedcount.New(cfg).Round(context.Background()) }()
	select {
	case <-counting:
	case err := <-done:
		t.Fatalf("relay-a's round ended before it counted: %v", err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		close(release)
	}()
	if err := b.round(t); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if u := b.last(t); u.own || b.counts.Load() != 0 || u.readings != `{"n": 1, "by": "relay-a"}` {
		t.Errorf("relay-b, started while relay-a made the first count, used %+v (%d counts of its own), want relay-a's readings", u, b.counts.Load())
	}
}
