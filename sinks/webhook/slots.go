package webhook

import (
	"sync"
	"sync/atomic"
	"time"
)

// A request that has waited long for its response gives its slot up to the
// next message, if fewer than slowMax × Concurrency slow requests are out
// already: a receiver that hangs on a tenth of the requests then holds the
// slow ones, not every slot, and the others keep flowing. The slow
// requests still end at Config.Timeout. Long is slowFactor times the
// receiver's usual response time (a moving average of the answered
// requests), within slowFloor and Config.SlowAfter.
const (
	slowMax    = 16
	slowFactor = 5
	slowFloor  = 5 * time.Millisecond
)

// latency is a moving average of the receiver's response times, in
// nanoseconds; 0 until the first response.
type latency struct{ avg atomic.Int64 }

// observe adds one response time to the average (weight 1/16).
func (l *latency) observe(d time.Duration) {
	for {
		old := l.avg.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/16
		}
		if l.avg.CompareAndSwap(old, next) {
			return
		}
	}
}

// slowAfter is when a request in flight counts as slow.
func (s *Sink) slowAfter() time.Duration {
	avg := time.Duration(s.latency.avg.Load())
	if avg == 0 {
		return s.cfg.SlowAfter
	}
	return min(max(slowFactor*avg, slowFloor), s.cfg.SlowAfter)
}

// heldSlot is the slot a request in flight holds: at first one of the
// sink's Concurrency slots, after slowAfter one of the slow ones.
type heldSlot struct {
	s     *Sink
	timer *time.Timer

	mu      sync.Mutex
	done    bool
	demoted bool // holds a slow slot instead of a normal one
}

// holdSlot starts watching a request that has taken a slot.
func (s *Sink) holdSlot() *heldSlot {
	h := &heldSlot{s: s}
	h.timer = time.AfterFunc(s.slowAfter(), h.demote)
	return h
}

// demote moves a slow request to a slow slot, freeing its slot, when one is
// free.
func (h *heldSlot) demote() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	select {
	case h.s.slow <- struct{}{}:
		h.demoted = true
		<-h.s.slots
	default: // too many slow requests already: keep the slot
	}
}

// release gives back whichever slot the request holds.
func (h *heldSlot) release() {
	h.timer.Stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	if h.demoted {
		<-h.s.slow
	} else {
		<-h.s.slots
	}
}
