package relay

import (
	"context"
	"sync"
)

// inFlight counts, per sink, the rows claimed and not yet settled, and wakes
// the claimer when rows are settled.
type inFlight struct {
	limit int

	mu    sync.Mutex
	count map[string]int
	freed chan struct{} // receives a token whenever rows are settled
}

func newInFlight(limit int) *inFlight {
	return &inFlight{limit: limit, count: map[string]int{}, freed: make(chan struct{}, 1)}
}

func (f *inFlight) add(sink string, n int) {
	f.mu.Lock()
	f.count[sink] += n
	f.mu.Unlock()
}

func (f *inFlight) done(sink string, n int) {
	f.mu.Lock()
	f.count[sink] -= n
	f.mu.Unlock()
	select {
	case f.freed <- struct{}{}:
	default:
	}
}

// full reports whether sink has reached the limit.
func (f *inFlight) full(sink string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count[sink] >= f.limit
}

// total returns the rows in flight over all sinks.
func (f *inFlight) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.count {
		n += c
	}
	return n
}

// waitFreed blocks until rows are settled or ctx ends.
func (f *inFlight) waitFreed(ctx context.Context) error {
	select {
	case <-f.freed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
