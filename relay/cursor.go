package relay

import (
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// claimCursor is where a relay's last full claim ended, in the order the
// claims walk the due index (available_at, id): while a backlog drains,
// the next claim walks from there (queryMessagesClaim's @after_at and
// @after_id) rather than from the claim floor.
//
// Why: the rows in flight stay in the due index, leased (a lease is a HOT
// update, which writes no index entry), and the floor cannot pass them, as
// their leases may run out. A draining relay keeps up to RELAY_MAX_IN_FLIGHT
// rows in flight, so every claim walked past those first, each a visit to
// the heap to read its lease (about 3,000 with the defaults, against the
// 1,000 it took).
//
// Why it loses nothing: below the cursor lie the rows in flight and the
// rows the claims since the last walk from the floor passed or could not
// see: rows another claim held locked and then let go, rows of a sink that
// was closed, rows whose lease ran out, and rows of a transaction that
// committed after a claim passed their place (the floor waits for such
// transactions; the cursor does not). A claim walks from the floor again at
// least every cursorFloorEvery, and after a claim that did not come back
// full (the backlog is drained, or the rows above the cursor ran out):
// such a row waits that much longer at most, and only while a backlog
// drains, when rows wait their turn anyway. A claim that walks
// from the floor takes the oldest rows first, those below the cursor
// included, and sets the cursor where it ended.
type claimCursor struct {
	mu sync.Mutex
	// at and id are where the last full claim ended; set while the claims
	// since came back full.
	at  time.Time
	id  int64
	set bool
	// walked is when a claim last walked from the floor.
	walked time.Time
}

// cursorFloorEvery is how often, at least, a claim walks from the claim
// floor while the claims start past the cursor: as often as the claim
// floor itself is refreshed while rows flow (relay/internal/floor), so
// that a row committed late waits for the cursor no longer than for the
// floor.
const cursorFloorEvery = 100 * time.Millisecond

// from returns where a claim that starts at now walks from (the first
// place in the walk's order it may take a row at): just past the cursor
// while it is set, is above the floor, and a claim walked from the floor
// less than cursorFloorEvery ago; otherwise from the floor itself (the
// smallest id at the floor's time, included: a row may hold any id), which
// it notes.
func (c *claimCursor) from(floor pgtype.Timestamptz, now time.Time) (pgtype.Timestamptz, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	aboveFloor := floor.InfinityModifier == pgtype.NegativeInfinity || !floor.Time.After(c.at)
	if c.set && aboveFloor && now.Sub(c.walked) < cursorFloorEvery {
		return pgtype.Timestamptz{Time: c.at, Valid: true}, c.id + 1
	}
	c.walked = now
	return floor, math.MinInt64
}

// claimed moves the cursor to (at, id), where a full claim ended in the
// walk's order (lastInWalk); after a claim that was not full it unsets it,
// so that the next claim walks from the floor. A claim's end is its last
// row as the claim returned it: a row another transaction changed while
// the claim waited for its lock comes back as it is now, and may move the
// cursor past entries the claim did not read; the next walk from the floor
// reads them. A row due at an infinite time (only a producer that skips the
// insert guard writes one) leaves the cursor unset, and so does the last
// id there is (no place lies past it).
func (c *claimCursor) claimed(at pgtype.Timestamptz, id int64, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set = full && at.Valid && at.InfinityModifier == pgtype.Finite && id != math.MaxInt64
	c.at, c.id = at.Time, id
}
