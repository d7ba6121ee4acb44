package floor

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The pace of the refreshes and the rescans, and the patience with
// transactions in progress (doc.go).
const (
	// refreshEvery is how often the floors are refreshed while claims
	// find rows (State.Found).
	refreshEvery = 100 * time.Millisecond
	// refreshIdleEvery is how often they are refreshed at least while
	// claims find none.
	refreshIdleEvery = time.Second
	// patience is how long a transaction in progress holds the floors
	// back.
	patience = time.Second
	// rescanEvery is how often a rescan reads the oldest rows.
	rescanEvery = time.Minute
	// rescanShare is how many times as long as the last rescan took the
	// next one waits at least (rescanEvery otherwise).
	rescanShare = 100
	// refreshIdleClaims is how many of an idle relay's claim pauses
	// (Config.IdlePause) go by between the floor's refreshes: a stale
	// floor is as safe, and the first claim that finds rows makes the
	// refreshes frequent again.
	refreshIdleClaims = 10
)

// State is a relay's claim floor and id floor, and what a refresh needs to
// move them. It needs no database: a Refresher feeds it what its refreshes
// and rescans read. Its methods are safe for concurrent use.
type State struct {
	// mu guards the fields below. Refreshes run one after the other (one
	// refresh loop per relay): they must read their snapshots in the order
	// they advance the floor.
	mu sync.Mutex
	// at is the floor and id the id floor; known is false until the
	// first refresh, and claims then start at the oldest row.
	at    time.Time
	id    int64
	known bool
	// refreshed is when the last refresh ran, rescanned when the last one
	// started at the oldest row, and marks the last two refreshes' start
	// times and marks, the latest last.
	refreshed, rescanned time.Time
	marks                []refreshMark
	// rescanTook is how long the last rescan took; rescanning is set
	// while one runs; rescanAt and rescanID, when set, are the oldest row
	// it read, which the next refresh lowers the floors to.
	rescanTook time.Duration
	rescanning bool
	rescanAt   *time.Time
	rescanID   *int64
	// seen holds the transactions in progress at the last refresh, with
	// the earliest time each one may have had its id and the smallest row
	// id it may hold (the zero time and the smallest bigint when it was in
	// progress at the first refresh: anything).
	seen map[uint64]txSince
	// busy is set when a claim found rows since the last refresh.
	busy bool
	// passed holds the transactions in progress at the last refresh that
	// did not hold the floors back (older than patience, or older than
	// the first refresh), as text: claims check whether they ended;
	// passedIDs holds, for each, the smallest row id it may hold (the id
	// floor goes back there when it ends).
	passed    []string
	passedIDs []int64
}

// NewState returns a claim floor before its first refresh: claims start
// at the oldest row.
func NewState() *State {
	return &State{id: math.MinInt64, seen: map[uint64]txSince{}}
}

// refreshRead is what one refresh reads: the start time of its
// transaction, its snapshot, its mark (an id it took after the snapshot),
// the smallest row id a transaction whose id is above the mark can take
// (next: the sequence's value, read before the mark, plus one; the
// smallest bigint when the sequence cannot tell), and the oldest row it
// sees at or above the floor it started from, by time and by id (none: an
// empty table above it); and how long it took, by the relay's clock.
type refreshRead struct {
	start    time.Time
	snapshot snapshot
	mark     uint64
	next     int64
	oldest   *time.Time
	oldestID *int64
	took     time.Duration
}

// refreshMark is a refresh's start time, mark and next id: a transaction
// whose id is above the mark had it after that time, and takes row ids
// from next up.
type refreshMark struct {
	start time.Time
	mark  uint64
	next  int64
}

// txSince is what a refresh knows of a transaction in progress: the
// earliest time it may have had its id, and the smallest row id it may
// hold.
type txSince struct {
	at time.Time
	id int64
}

// idSince returns what s knows of transaction x: the start and next id of
// the latest refresh whose mark is below x, or the zero time and the
// smallest bigint (anything) when no refresh's is.
func (s *State) idSince(x uint64) txSince {
	for i := len(s.marks) - 1; i >= 0; i-- {
		if s.marks[i].mark < x {
			return txSince{at: s.marks[i].start, id: s.marks[i].next}
		}
	}
	return txSince{id: math.MinInt64}
}

// Current returns the floor claims pass as @floor: the bound, or -infinity
// before the first refresh and while the floor is any time.
func (s *State) Current() pgtype.Timestamptz {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.known || s.at.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: s.at, Valid: true}
}

// IDs returns what the lookups of a key's rows start from (IDFloor), in the
// order of its arguments: the id floor (@id_floor: the smallest bigint
// before the first refresh), the transactions it passed while they were in
// progress (@passed_writers, as text) and the smallest row id each of them
// may hold (@passed_ids). The slices are never nil; the caller must not
// change them.
func (s *State) IDs() (id int64, passed []string, passedIDs []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.known {
		return math.MinInt64, []string{}, []int64{}
	}
	return s.id, s.passed, s.passedIDs
}

// Found records that a claim found rows: refreshes come sooner.
func (s *State) Found() {
	s.mu.Lock()
	s.busy = true
	s.mu.Unlock()
}

// due reports whether a refresh is due at now, given the claims' idle
// pause, and the floors it starts from: -infinity and the smallest bigint
// (ok false) for the first refresh and after one that found no floor. (An
// id floor at the smallest bigint starts from there too.)
func (s *State) due(now time.Time, idle time.Duration) (refresh bool, from txSince, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	every := max(refreshIdleEvery, refreshIdleClaims*idle)
	if s.busy {
		every = refreshEvery
	}
	if s.known && now.Sub(s.refreshed) < every {
		return false, txSince{}, false
	}
	if !s.known || s.at.IsZero() {
		return true, txSince{id: math.MinInt64}, false
	}
	return true, txSince{at: s.at, id: s.id}, true
}

// advance moves the floors with what a refresh read, at now (the relay's
// clock, for the refresh intervals only), and returns the floor. from and
// fromKnown are the floors the refresh started from (due): when fromKnown
// is false it started from the oldest row.
func (s *State) advance(now time.Time, from txSince, fromKnown bool, rd refreshRead) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Transactions with ids above the last refresh's mark had them after
	// it began, and take row ids from its next id up; at the first
	// refresh, anything.
	floor := txSince{id: math.MinInt64}
	if len(s.marks) > 0 {
		floor = txSince{at: s.marks[len(s.marks)-1].start, id: s.marks[len(s.marks)-1].next}
	}
	lowerAt := func(t time.Time) {
		if t.Before(floor.at) {
			floor.at = t
		}
	}
	lowerID := func(id int64) {
		if id < floor.id {
			floor.id = id
		}
	}
	if rd.oldest != nil {
		lowerAt(*rd.oldest)
	}
	if rd.oldestID != nil {
		lowerID(*rd.oldestID)
	}
	if s.rescanAt != nil {
		lowerAt(*s.rescanAt)
	}
	if s.rescanID != nil {
		lowerID(*s.rescanID)
	}
	s.rescanAt, s.rescanID = nil, nil
	inProgress := make(map[uint64]bool, len(rd.snapshot.xip))
	for _, x := range rd.snapshot.xip {
		inProgress[x] = true
	}
	// Transactions in progress at the last refresh that have ended: their
	// rows are visible now, and lie below the floor the refresh started
	// from when their time is before it (an old transaction no longer
	// held it back).
	for x, since := range s.seen {
		if !inProgress[x] {
			if fromKnown && since.at.Before(from.at) {
				lowerAt(since.at)
			}
			if fromKnown && since.id < from.id {
				lowerID(since.id)
			}
			delete(s.seen, x)
		}
	}
	// Transactions in progress now, listed: young ones hold the floor
	// back; an old one (any time is old) sends it back when it ends, and
	// until then claims check whether it did.
	passed, passedIDs := []string{}, []int64{}
	for x := range inProgress {
		since, ok := s.seen[x]
		if !ok {
			since = s.idSince(x)
			s.seen[x] = since
		}
		if rd.start.Sub(since.at) < patience {
			lowerAt(since.at)
			lowerID(since.id)
		} else {
			passed = append(passed, strconv.FormatUint(x, 10))
			passedIDs = append(passedIDs, since.id)
		}
	}
	s.passed, s.passedIDs = passed, passedIDs
	s.at, s.id, s.known = floor.at, floor.id, true
	s.marks = append(s.marks, refreshMark{start: rd.start, mark: rd.mark, next: rd.next})
	if len(s.marks) > 2 {
		s.marks = s.marks[len(s.marks)-2:]
	}
	s.refreshed, s.busy = now, false
	if !fromKnown {
		s.rescanned, s.rescanTook = now, rd.took
	}
	return floor.at
}

// rescanDue reports whether a rescan is due at now, and if so marks one
// under way: the caller runs it and reports with rescanDone.
func (s *State) rescanDue(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.known || s.rescanning || !s.refreshed.After(s.rescanned) ||
		now.Sub(s.rescanned) < max(rescanEvery, rescanShare*s.rescanTook) {
		return false
	}
	s.rescanning = true
	return true
}

// rescanDone records a rescan that ended at now after took, and the oldest
// rows it read (nil: none, or the rescan failed), for the next refresh to
// lower the floors to.
func (s *State) rescanDone(now time.Time, took time.Duration, oldest *time.Time, oldestID *int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rescanning, s.rescanned, s.rescanTook = false, now, took
	if oldest != nil && (s.rescanAt == nil || oldest.Before(*s.rescanAt)) {
		s.rescanAt = oldest
	}
	if oldestID != nil && (s.rescanID == nil || *oldestID < *s.rescanID) {
		s.rescanID = oldestID
	}
}
