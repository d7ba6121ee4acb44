package floor

import (
	"slices"
	"time"
)

// Status is what a State knows, for tests and diagnostics: the relay's
// claims read the floors through Current and IDs.
type Status struct {
	// Known is false until the first refresh.
	Known bool
	// At is the floor (the zero time: any time) and ID the id floor.
	At time.Time
	ID int64
	// Passed and PassedIDs are what IDs returns besides the id floor.
	Passed    []string
	PassedIDs []int64
	// AnyAge counts the transactions in progress at the last refresh that
	// may have had their ids at any time (they were in progress at the
	// first refresh): when one ends, the floors go back to the oldest row.
	AnyAge int
	// Refreshed is when the last refresh ran, Rescanned when the last
	// rescan ended (or a refresh started at the oldest row).
	Refreshed, Rescanned time.Time
	// Rescanning is set while a rescan runs.
	Rescanning bool
	// RescanAt and RescanID, when set, are the oldest rows the last rescans
	// read, which the next refresh lowers the floors to.
	RescanAt *time.Time
	RescanID *int64
}

// Status returns what s knows now.
func (s *State) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status()
}

// status is Status with s.mu held.
func (s *State) status() Status {
	st := Status{
		Known: s.known, At: s.at, ID: s.id,
		Passed: slices.Clone(s.passed), PassedIDs: slices.Clone(s.passedIDs),
		Refreshed: s.refreshed, Rescanned: s.rescanned, Rescanning: s.rescanning,
	}
	for _, since := range s.seen {
		if since.at.IsZero() {
			st.AnyAge++
		}
	}
	if s.rescanAt != nil {
		at := *s.rescanAt
		st.RescanAt = &at
	}
	if s.rescanID != nil {
		id := *s.rescanID
		st.RescanID = &id
	}
	return st
}

// Set puts the floors where a test wants them, as if a refresh had
// computed them: the floor at (the zero time: any time), the id floor id
// (math.MinInt64 when a test sets the floor alone), and the
// transactions it passed with the smallest row ids they may hold (nil:
// none).
func (s *State) Set(at time.Time, id int64, passed []string, passedIDs []int64) {
	if len(passed) != len(passedIDs) {
		panic("floor: Set with passed and passedIDs of different lengths")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at, s.id, s.known = at, id, true
	s.passed, s.passedIDs = append([]string{}, passed...), append([]int64{}, passedIDs...)
}

// RescannedIf counts a rescan as done now, so that none is due for
// rescanEvery, when cond holds of the status, in one step (a refresh
// cannot come between), and reports whether it did: a test that wants no
// rescan until it asks for one (RescanNow) waits for the state it needs
// this way.
func (s *State) RescannedIf(now time.Time, cond func(Status) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !cond(s.status()) {
		return false
	}
	s.rescanned = now
	return true
}

// RescanNow makes a rescan due at the rescan loop's next look (within a
// second), once a refresh has run.
func (s *State) RescanNow() {
	s.mu.Lock()
	s.rescanned = time.Time{}
	s.mu.Unlock()
}
