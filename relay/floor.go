package relay

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The claim floor: the time below which no row can be due, which every
// claim passes as its lower bound on available_at (@floor), so that the
// dead index entries of the rows delivered before it stay off the claim's
// path. Without it a claim walks the due index from its oldest entry, and
// while another session's snapshot keeps PostgreSQL from removing the rows
// the relay deleted (a pinned MVCC horizon), every claim walks every row
// delivered since that snapshot began: claims get slower without bound.
//
// The floor never skips a row, because of one rule that the insert guard
// and the update guard keep (migration 9): a row version's available_at is
// never earlier than the time its writing transaction had its id, unless
// the version before it was already that early (the relay's claims and
// settles never move a row earlier). A refresh (queryFloor) reads, in one
// statement: its transaction's start time (now(), before its snapshot),
// its snapshot (pg_current_snapshot()), an id of its own
// (pg_current_xact_id(), taken after the snapshot: a mark that every later
// transaction's id exceeds) and the oldest row it sees at or above the
// current floor. A snapshot lists the transactions in progress below its
// xmax, and xmax is only past the last one to end, so a transaction in
// progress may be missing from the list; but once refresh k-1's own
// transaction has ended, refresh k's snapshot lists every transaction in
// progress below refresh k-1's mark. So, at refresh k:
//
//   - a transaction in progress with an id above mark k-1 had it after
//     refresh k-1 began: its rows are due no earlier than that start;
//   - one first listed now had its id after the start of the latest
//     refresh whose mark is below it (any time if there is none);
//   - the new floor is the oldest of: the oldest visible row, refresh
//     k-1's start, the times of the young transactions in progress, and
//     the times of the transactions that ended since refresh k-1 while the
//     floor was above them.
//
// A transaction in progress for longer than floorPatience no longer holds
// the floor back (a BEGIN left open in psql would hold it for hours, and
// the floor would not help): when it ends, the floor goes back to its time,
// once, and the next refresh walks up from there. Its rows wait at most a
// refresh longer. Rows written without the guards (a session with
// session_replication_role = replica skips triggers) may break the rule:
// every floorRescanEvery a rescan reads the oldest row, and the next
// refresh lowers the floors to it (floor_rescan.go), so such a row waits
// that long at most; or, while a rescan takes longer than a
// floorRescanShare-th of that, floorRescanShare times as long as the last
// rescan took.
//
// The id floor: an id below which no row can be pending or become
// visible, from which the lookups of a key's oldest row start (ofKey), so
// that the dead entries of a key's delivered rows stay off their path. It
// follows the same refreshes and the same rule for ids (migration 12): a
// transaction takes its id before any row id, so a transaction whose id is
// above a refresh's mark takes row ids above the sequence's value that
// refresh read before its mark. The id floor is then the oldest of: the
// oldest visible row at or above the last id floor, the next id of refresh
// k-1, and the ids the transactions in progress may hold (the next id of
// the latest refresh whose mark is below theirs), with the same patience
// and the same going back when an old one ends. A sequence that hands out
// cached values (CACHE above 1) or cycles breaks the rule: the id floor
// then stays at the smallest bigint. A transaction in progress for longer
// than floorPatience does not hold the id floor back either; until the next
// refresh sends the floor back to its ids, claims pass its id as one the
// floor passed (passedWriters), and a claim whose snapshot sees it ended
// looks its keys up from the smallest id (idFloor in sql_buckets.go): a row
// it committed is never overtaken by a later row of its key.
//
// Refreshes run in a loop of their own (floorLoop), every floorEvery while
// claims find rows and every floorIdleEvery otherwise, or once every
// floorIdleClaims claims of an idle relay that backs off
// (Config.IdlePollInterval): an idle relay costs one statement a second
// more at most, so that a claim never waits for one (a refresh from the
// oldest row under a pinned horizon walks every dead entry); a claim uses the
// floor as it is, as any floor the relay computed stays safe, only less
// useful, while it ages. Each refresh takes a transaction id, as a claim
// that leases rows does.

const (
	floorEvery       = 100 * time.Millisecond
	floorIdleEvery   = time.Second
	floorPatience    = time.Second
	floorRescanEvery = time.Minute
	// floorRescanShare is how many times as long as the last rescan
	// took the next one waits at least (floorRescanEvery otherwise).
	floorRescanShare = 100
	// floorIdleClaims is how many of an idle relay's claim pauses
	// (Config.IdlePollInterval) go by between the floor's refreshes: a
	// stale floor is as safe, and the first claim that finds rows makes
	// the refreshes frequent again.
	floorIdleClaims = 10
)

// claimFloor is a relay's claim floor and what a refresh needs to move it.
type claimFloor struct {
	// mu guards the fields below. Refreshes run one after the other (one
	// floorLoop per relay): they must read their snapshots in the order
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
	marks                []floorMark
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
	// did not hold the floors back (older than floorPatience, or older
	// than the first refresh), as text: claims check whether they ended;
	// passedIDs holds, for each, the smallest row id it may hold (the id
	// floor goes back there when it ends).
	passed    []string
	passedIDs []int64
}

// newFloor returns a claim floor before its first refresh.
func newFloor() *claimFloor {
	return &claimFloor{id: math.MinInt64, seen: map[uint64]txSince{}}
}

// floorRead is what one refresh reads: the start time of its transaction,
// its snapshot, its mark (an id it took after the snapshot), the smallest
// row id a transaction whose id is above the mark can take (next: the
// sequence's value, read before the mark, plus one; the smallest bigint
// when the sequence cannot tell), and the oldest row it sees at or above
// the floor it started from, by time and by id (none: an empty table
// above it); and how long it took, by the relay's clock.
type floorRead struct {
	start    time.Time
	snapshot pgSnapshot
	mark     uint64
	next     int64
	oldest   *time.Time
	oldestID *int64
	took     time.Duration
}

// floorMark is a refresh's start time, mark and next id: a transaction
// whose id is above the mark had it after that time, and takes row ids
// from next up.
type floorMark struct {
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

// idSince returns what f knows of transaction x: the start and next id of
// the latest refresh whose mark is below x, or the zero time and the
// smallest bigint (anything) when no refresh's is.
func (f *claimFloor) idSince(x uint64) txSince {
	for i := len(f.marks) - 1; i >= 0; i-- {
		if f.marks[i].mark < x {
			return txSince{at: f.marks[i].start, id: f.marks[i].next}
		}
	}
	return txSince{id: math.MinInt64}
}

// pgSnapshot is a pg_snapshot: transactions below xmin have ended, those
// at xmax or above had not begun, and those listed in xip were in
// progress.
type pgSnapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// parseSnapshot reads a pg_snapshot's text form: xmin:xmax:xip,xip,….
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip", s)
	}
	var snap pgSnapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return pgSnapshot{}, fmt.Errorf("snapshot %q: xmin: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return pgSnapshot{}, fmt.Errorf("snapshot %q: xmax: %w", s, err)
	}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			id, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return pgSnapshot{}, fmt.Errorf("snapshot %q: xip: %w", s, err)
			}
			snap.xip = append(snap.xip, id)
		}
	}
	return snap, nil
}

// current returns the floor claims use: the bound, or -infinity before the
// first refresh.
func (f *claimFloor) current() pgtype.Timestamptz {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known || f.at.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: f.at, Valid: true}
}

// currentID returns the id floor the lookups of a key's rows start from
// (the smallest bigint before the first refresh) and the transactions it
// passed while they were in progress (passed).
func (f *claimFloor) currentID() (int64, []string) {
	id, passed, _ := f.currentIDs()
	return id, passed
}

// currentIDs returns the id floor, the transactions it passed, and the
// smallest row id each of them may hold.
func (f *claimFloor) currentIDs() (int64, []string, []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known {
		return math.MinInt64, []string{}, []int64{}
	}
	return f.id, f.passed, f.passedIDs
}

// idFloorArgs adds to args what ofKey's lookups take: the id floor, the
// transactions it passed and the smallest row ids they may hold (idFloor),
// and returns args.
func (r *Relay) idFloorArgs(args pgx.StrictNamedArgs) pgx.StrictNamedArgs {
	args["id_floor"], args["passed_writers"], args["passed_ids"] = r.floor.currentIDs()
	return args
}

// found records that a claim found rows: refreshes come sooner.
func (f *claimFloor) found() {
	f.mu.Lock()
	f.busy = true
	f.mu.Unlock()
}

// due reports whether a refresh is due at now, and the floors it starts
// from: -infinity and the smallest bigint (ok false) for the first refresh
// and after one that found no floor. (An id floor at the smallest bigint
// starts from there too.)
func (f *claimFloor) due(now time.Time, idle time.Duration) (refresh bool, from txSince, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	every := max(floorIdleEvery, floorIdleClaims*idle)
	if f.busy {
		every = floorEvery
	}
	if f.known && now.Sub(f.refreshed) < every {
		return false, txSince{}, false
	}
	if !f.known || f.at.IsZero() {
		return true, txSince{id: math.MinInt64}, false
	}
	return true, txSince{at: f.at, id: f.id}, true
}

// advance moves the floors with what a refresh read, at now (the relay's
// clock, for the refresh intervals only), and returns the floor. from and
// fromKnown are the floors the refresh started from (due): when fromKnown
// is false it started from the oldest row.
func (f *claimFloor) advance(now time.Time, from txSince, fromKnown bool, rd floorRead) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Transactions with ids above the last refresh's mark had them after
	// it began, and take row ids from its next id up; at the first
	// refresh, anything.
	floor := txSince{id: math.MinInt64}
	if len(f.marks) > 0 {
		floor = txSince{at: f.marks[len(f.marks)-1].start, id: f.marks[len(f.marks)-1].next}
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
	if f.rescanAt != nil {
		lowerAt(*f.rescanAt)
	}
	if f.rescanID != nil {
		lowerID(*f.rescanID)
	}
	f.rescanAt, f.rescanID = nil, nil
	inProgress := make(map[uint64]bool, len(rd.snapshot.xip))
	for _, x := range rd.snapshot.xip {
		inProgress[x] = true
	}
	// Transactions in progress at the last refresh that have ended: their
	// rows are visible now, and lie below the floor the refresh started
	// from when their time is before it (an old transaction no longer
	// held it back).
	for x, since := range f.seen {
		if !inProgress[x] {
			if fromKnown && since.at.Before(from.at) {
				lowerAt(since.at)
			}
			if fromKnown && since.id < from.id {
				lowerID(since.id)
			}
			delete(f.seen, x)
		}
	}
	// Transactions in progress now, listed: young ones hold the floor
	// back; an old one (any time is old) sends it back when it ends, and
	// until then claims check whether it did.
	passed, passedIDs := []string{}, []int64{}
	for x := range inProgress {
		since, ok := f.seen[x]
		if !ok {
			since = f.idSince(x)
			f.seen[x] = since
		}
		if rd.start.Sub(since.at) < floorPatience {
			lowerAt(since.at)
			lowerID(since.id)
		} else {
			passed = append(passed, strconv.FormatUint(x, 10))
			passedIDs = append(passedIDs, since.id)
		}
	}
	f.passed, f.passedIDs = passed, passedIDs
	f.at, f.id, f.known = floor.at, floor.id, true
	f.marks = append(f.marks, floorMark{start: rd.start, mark: rd.mark, next: rd.next})
	if len(f.marks) > 2 {
		f.marks = f.marks[len(f.marks)-2:]
	}
	f.refreshed, f.busy = now, false
	if !fromKnown {
		f.rescanned, f.rescanTook = now, rd.took
	}
	return floor.at
}

// floorLoop refreshes r's claim floor until ctx ends. A failed refresh
// leaves the floor where it was (claims go on from there) and is logged
// once, then at growing intervals while refreshes fail (reminder).
func (r *Relay) floorLoop(ctx context.Context) {
	t := time.NewTicker(floorEvery)
	defer t.Stop()
	var failing reminder
	for {
		// A refresh stuck on a lock or a dead connection gives up after a
		// lease, as claims give up after a quarter of one.
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Lease)
		err := r.refreshFloor(rctx)
		cancel()
		now := time.Now()
		switch {
		case err == nil:
			if !failing.since.IsZero() {
				r.log.Info("claim floor refreshes again", "failed_for", failing.end(now).Round(time.Second))
			}
		case ctx.Err() != nil:
			return
		case failing.begin(now), failing.due(now):
			r.log.Warn("refresh claim floor: claims go on from the last floor", "err", redactConnError(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshFloor refreshes r's claim floor when a refresh is due, and reports
// how far the floor lies behind the refresh's start
// (outbox_relay_claim_floor_lag_seconds).
func (r *Relay) refreshFloor(ctx context.Context) error {
	f := r.floor
	refresh, from, fromKnown := f.due(time.Now(), time.Duration(r.idlePause.Load()))
	if !refresh {
		return nil
	}
	start := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	if fromKnown {
		start = pgtype.Timestamptz{Time: from.at, Valid: true}
	}
	var rd floorRead
	var snap, mark string
	var last *int64
	var sequential *bool
	var oldest pgtype.Timestamptz
	// The lookups of the oldest rows at or above the last floors walk
	// their indexes in order (queryClaimPlan). Planned for statistics
	// taken while the table was nearly empty, each read every entry above
	// the floor with a bitmap scan before sorting them (under a pinned
	// horizon, every dead one): in ordered mode through messages_key_idx,
	// whose predicate the lookup implies, 85,000 buffers and 1.6 s per
	// refresh, every 100 ms; 5 ms walked in order.
	args := pgx.StrictNamedArgs{"start": start, "start_id": from.id}
	began := time.Now()
	err := r.inPipeline(ctx, "BEGIN", []pipelined{{sql: r.q.claimPlan}, {sql: r.q.floor, args: args}}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.QueryRow().Scan(&rd.start, &snap, &last, &mark, &sequential, &oldest, &rd.oldestID)
	})
	if err != nil {
		return fmt.Errorf("refresh claim floor: %w", err)
	}
	rd.took = time.Since(began)
	rd.next = math.MinInt64
	if last != nil && sequential != nil && *sequential && *last < math.MaxInt64 {
		rd.next = *last + 1
	}
	if rd.snapshot, err = parseSnapshot(snap); err != nil {
		return fmt.Errorf("refresh claim floor: %w", err)
	}
	if rd.mark, err = strconv.ParseUint(mark, 10, 64); err != nil {
		return fmt.Errorf("refresh claim floor: mark %q: %w", mark, err)
	}
	if oldest.Valid && oldest.InfinityModifier == pgtype.Finite {
		rd.oldest = &oldest.Time
	}
	floor := f.advance(time.Now(), from, fromKnown, rd)
	lag := rd.start.Sub(floor)
	if floor.IsZero() {
		lag = 0
	}
	r.metrics.ClaimFloorLag.Set(lag.Seconds())
	return nil
}
