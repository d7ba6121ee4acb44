package buckets

import (
	"slices"
	"sync"
	"time"
)

// Count is the number of buckets (migration 7, messages_bucket).
const Count = 64

// maxWeight bounds the weight of a bucket's share of a claim.
const maxWeight = 1 << 10

// owned is a bucket the relay owns.
type owned struct {
	epoch int64
	// inFlight counts its rows claimed and not yet settled.
	inFlight int
	// releasing is when the relay decided to give it up (zero: it keeps
	// it): no claim takes its rows, and it is released once inFlight is 0.
	releasing time.Time
	// weight sizes its share of a claim: doubled while claims fill it.
	weight int
	// claiming counts the claims under way that may lease its rows: it is
	// not released before they are done.
	claiming int
}

// State is a relay's view of the buckets it owns: their epochs, their rows
// in flight, their shares of a claim and which it is giving up. It needs no
// database; Owner keeps it in line with the buckets table. Its methods are
// safe for concurrent use.
type State struct {
	mu    sync.Mutex
	owned map[int32]*owned
	// turn rotates which buckets get the rows of a claim smaller than the
	// number of buckets.
	turn int
	// drained receives when a bucket being given up has nothing left in
	// flight: it can be released now rather than at the next round.
	drained chan struct{}
}

// NewState returns the state of a relay that owns no bucket.
func NewState() *State {
	return &State{owned: map[int32]*owned{}, drained: make(chan struct{}, 1)}
}

// Claim is what one claim may take rows from: buckets in order, the epoch
// under which the relay owns each, and the most rows each may give.
type Claim struct {
	Buckets []int32
	Epochs  []int64
	Shares  []int32
}

// Epoch returns the epoch under which c took rows of bucket (0 when c does
// not hold it): the fence the rows' settle must present, even when the
// bucket has changed hands since.
func (c Claim) Epoch(bucket int32) int64 {
	if i, ok := slices.BinarySearch(c.Buckets, bucket); ok {
		return c.Epochs[i]
	}
	return 0
}

// Fence is a bucket and the epoch a row was claimed under: what the row's
// settle presents.
type Fence struct {
	Bucket int32
	Epoch  int64
}

// Claimable returns what a claim of up to limit rows may take: the buckets
// owned and not being given up (at most most of them, taken in turn, when
// most > 0), with their epochs and the share of limit rows each may give,
// adding up to at most limit, larger for buckets whose weight grew. Every
// bucket returned counts the claim as under way until Claimed.
func (s *State) Claimable(limit, most int) Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int32
	for id, o := range s.owned {
		if o.releasing.IsZero() {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return Claim{}
	}
	slices.Sort(ids)
	s.turn++
	if most > 0 && len(ids) > most {
		start := s.turn * most % len(ids)
		ids = append(ids[start:], ids[:start]...)[:most]
		slices.Sort(ids)
	}
	total := 0
	for _, id := range ids {
		total += s.owned[id].weight
	}
	c := Claim{Buckets: ids, Epochs: make([]int64, len(ids)), Shares: make([]int32, len(ids))}
	given := 0
	for i, id := range ids {
		o := s.owned[id]
		o.claiming++
		c.Epochs[i] = o.epoch
		c.Shares[i] = int32(limit * o.weight / total)
		given += int(c.Shares[i])
	}
	// What the rounding left goes one row each, from a rotating start.
	for i := 0; given < limit && i < len(ids); i++ {
		c.Shares[(s.turn+i)%len(ids)]++
		given++
	}
	return c
}

// Claimed records the end of claim c, failed or not; rows holds the
// bucket of each row it leased. Those rows are in flight; each bucket that
// gave all its share gets a larger share next time, the others their base
// share.
func (s *State) Claimed(c Claim, rows []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A bucket lost and acquired again while the claim ran is another
	// ownership, under another epoch: the claim counted on the old one.
	current := func(i int) *owned {
		if o := s.owned[c.Buckets[i]]; o != nil && o.epoch == c.Epochs[i] {
			return o
		}
		return nil
	}
	for i := range c.Buckets {
		if o := current(i); o != nil {
			o.claiming--
			defer s.signalIfDrained(o)
		}
	}
	got := map[int32]int32{}
	for _, bucket := range rows {
		got[bucket]++
		if o := s.owned[bucket]; o != nil && o.epoch == c.Epoch(bucket) {
			o.inFlight++
		}
	}
	for i, id := range c.Buckets {
		o := current(i)
		if o == nil || c.Shares[i] == 0 {
			continue
		}
		if got[id] >= c.Shares[i] {
			o.weight = min(2*o.weight, maxWeight)
		} else {
			o.weight = 1
		}
	}
}

// Settled records rows written down (or given up), each by the fence it
// was claimed under: they are no longer in flight.
func (s *State) Settled(rows []Fence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range rows {
		if o := s.owned[f.Bucket]; o != nil && o.epoch == f.Epoch {
			o.inFlight--
			s.signalIfDrained(o)
		}
	}
}

// signalIfDrained signals drained when o is being given up and holds
// nothing; s.mu is held.
func (s *State) signalIfDrained(o *owned) {
	if !o.releasing.IsZero() && o.inFlight <= 0 && o.claiming <= 0 {
		select {
		case s.drained <- struct{}{}:
		default:
		}
	}
}

// Drained receives when a bucket being given up has nothing left in
// flight.
func (s *State) Drained() <-chan struct{} { return s.drained }

// Plan is what a round does after Reconcile.
type Plan struct {
	// Lost are the buckets the relay no longer holds (their leases ran
	// out before it renewed them); the state has forgotten them.
	Lost []int32
	// Release are the buckets to release now, with the epochs they are
	// held under and when the relay decided to give each up.
	Release   []int32
	Epochs    []int64
	DecidedAt []time.Time
	// Want is how many free buckets to acquire.
	Want int
}

// Reconcile brings the state in line with the buckets a round renewed
// (with their epochs) and decides the round against target, the relay's
// share. Buckets it no longer holds are lost; buckets held under its id
// that it did not know of (left by an earlier process with the same id) are
// released at once. When the relay keeps more than target, it starts giving
// up the excess (the highest buckets); when fewer, it keeps those it was
// giving up first, then wants free ones. A bucket given up is released once
// no claim is under way on it and its rows in flight are settled, or have
// been in flight longer than rowLease.
func (s *State) Reconcile(renewed map[int32]int64, target int, rowLease time.Duration, now time.Time) Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p Plan
	for id, o := range s.owned {
		if e, ok := renewed[id]; !ok || e != o.epoch {
			p.Lost = append(p.Lost, id)
			delete(s.owned, id)
		}
	}
	slices.Sort(p.Lost)
	release := func(id int32, epoch int64, at time.Time) {
		p.Release, p.Epochs, p.DecidedAt = append(p.Release, id), append(p.Epochs, epoch), append(p.DecidedAt, at)
	}
	for id, e := range renewed {
		if _, ok := s.owned[id]; !ok {
			release(id, e, now)
		}
	}
	var kept, giving []int32
	for id, o := range s.owned {
		if o.releasing.IsZero() {
			kept = append(kept, id)
		} else {
			giving = append(giving, id)
		}
	}
	slices.Sort(kept)
	slices.Sort(giving)
	switch {
	case len(kept) > target:
		for _, id := range kept[target:] {
			s.owned[id].releasing = now
		}
	case len(kept) < target:
		for _, id := range giving {
			if len(kept) == target {
				break
			}
			s.owned[id].releasing = time.Time{}
			kept = append(kept, id)
		}
		p.Want = target - len(kept)
	}
	for id, o := range s.owned {
		if !o.releasing.IsZero() && o.claiming <= 0 && (o.inFlight <= 0 || now.Sub(o.releasing) > rowLease) {
			release(id, o.epoch, o.releasing)
		}
	}
	return p
}

// Drop forgets buckets released under the given epochs.
func (s *State) Drop(ids []int32, epochs []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		if o := s.owned[id]; o != nil && o.epoch == epochs[i] {
			delete(s.owned, id)
		}
	}
}

// Add records buckets acquired with their epochs and returns their ids in
// order.
func (s *State) Add(acquired map[int32]int64) []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int32, 0, len(acquired))
	for id, e := range acquired {
		s.owned[id] = &owned{epoch: e, weight: 1}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Releasing reports whether the relay is giving up a bucket.
func (s *State) Releasing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.owned {
		if !o.releasing.IsZero() {
			return true
		}
	}
	return false
}

// Owned returns how many buckets the relay owns.
func (s *State) Owned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.owned)
}

// All returns the buckets the relay owns, with their epochs.
func (s *State) All() (ids []int32, epochs []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, o := range s.owned {
		ids, epochs = append(ids, id), append(epochs, o.epoch)
	}
	return ids, epochs
}

// Share is how many buckets the relay of rank (0-based, by id) gets when n
// relays share them: as even as can be, the first ones one more.
func Share(rank, n int) int {
	if n == 0 {
		return Count
	}
	s := Count / n
	if rank < Count%n {
		s++
	}
	return s
}
