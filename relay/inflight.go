package relay

import (
	"context"
	"sync"
)

// inFlight counts, per sink, the rows claimed and not yet settled, and wakes
// the claimer when rows are settled.
type inFlight struct {
	limit     int
	byteLimit int64

	mu    sync.Mutex
	count map[string]int
	bytes int64         // payload bytes of every row in flight
	freed chan struct{} // receives a token whenever rows are settled
}

func newInFlight(limit int, byteLimit int64) *inFlight {
	return &inFlight{limit: limit, byteLimit: byteLimit, count: map[string]int{}, freed: make(chan struct{}, 1)}
}

// takeBytes reserves, for one of n concurrent claims, its share of the
// payload bytes the relay may still hold, and returns it (0 when none is
// left: the claim waits), and whether the claim may take one row larger
// than its share: only when the relay holds no payload at all, so that a
// row larger than a share of the budget goes alone and the budget holds
// otherwise (a row larger than the whole budget is claimed unread). The claim gives back what it did not use with addBytes, so
// that claims running at once stay within the budget together.
func (f *inFlight) takeBytes(n int) (share int64, oversized bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	room := f.byteLimit - f.bytes
	if room <= 0 {
		return 0, false
	}
	oversized = f.bytes == 0
	share = max(room/int64(n), 1)
	f.bytes += share
	return share, oversized
}

// addBytes counts n payload bytes claimed (negative: settled).
func (f *inFlight) addBytes(n int64) {
	f.mu.Lock()
	f.bytes += n
	f.mu.Unlock()
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

// reserve takes room for a claim of up to n rows from every sink in open,
// as much as the fullest of them has left, and returns it: 0 when one is
// full, or has less than atLeast rows left (nothing is then taken).
// Reserving before claiming keeps every sink within the limit however
// many claims run at once; unreserve gives back what the claim did not use.
func (f *inFlight) reserve(open []string, n, atLeast int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range open {
		n = min(n, f.limit-f.count[s])
	}
	if n < max(atLeast, 1) {
		return 0
	}
	for _, s := range open {
		f.count[s] += n
	}
	return n
}

// unreserve gives back, for each sink in open, the part of a reservation of
// n rows that the claim did not use (used[sink] rows went to that sink).
func (f *inFlight) unreserve(open []string, n int, used map[string]int) {
	f.mu.Lock()
	for _, s := range open {
		f.count[s] -= n - used[s]
	}
	f.mu.Unlock()
	select {
	case f.freed <- struct{}{}:
	default:
	}
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
