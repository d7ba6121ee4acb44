// Package floor is the claim floor: the time below which no row of the
// messages table can be due, and the id below which none can be pending,
// which the relay's claims pass as their lower bounds so that the dead
// index entries of the rows delivered before them stay off the claims'
// path. A State holds the floors and needs no database; a Refresher keeps
// them moving against PostgreSQL (Run) and reports through a logger and
// Hooks.
//
// # Why a floor
//
// Every claim passes the floor as its lower bound on available_at (@floor),
// so that the dead index entries of the rows delivered before it stay off
// the claim's path. Without it a claim walks the due index from its oldest
// entry, and while another session's snapshot keeps PostgreSQL from
// removing the rows the relay deleted (a pinned MVCC horizon), every claim
// walks every row delivered since that snapshot began: claims get slower
// without bound.
//
// # The rule that keeps it safe
//
// The floor never skips a row, because of one rule that the insert guard
// and the update guard keep (migration 9): a row version's available_at is
// never earlier than the time its writing transaction had its id, unless
// the version before it was already that early (the relay's claims and
// settles never move a row earlier).
//
// # A refresh
//
// A refresh (the Refresh statement of Statements) reads, in one statement:
// its transaction's start time (now(), before its snapshot), its snapshot
// (pg_current_snapshot()), an id of its own (pg_current_xact_id(), taken
// after the snapshot: a mark that every later transaction's id exceeds)
// and the oldest row it sees at or above the current floor. A snapshot
// lists the transactions in progress below its xmax, and xmax is only past
// the last one to end, so a transaction in progress may be missing from
// the list; but once refresh k-1's own transaction has ended, refresh k's
// snapshot lists every transaction in progress below refresh k-1's mark.
// So, at refresh k:
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
// A transaction in progress for longer than patience (a second) no longer
// holds the floor back (a BEGIN left open in psql would hold it for hours,
// and the floor would not help): when it ends, the floor goes back to its
// time, once, and the next refresh walks up from there. Its rows wait at
// most a refresh longer.
//
// # The id floor
//
// The id floor is an id below which no row can be pending or become
// visible, from which the lookups of a key's oldest row start (the relay's
// ofKey), so that the dead entries of a key's delivered rows stay off their
// path. It follows the same refreshes and the same rule for ids (migration
// 12): a transaction takes its id before any row id, so a transaction whose
// id is above a refresh's mark takes row ids above the sequence's value
// that refresh read before its mark. The id floor is then the oldest of:
// the oldest visible row at or above the last id floor, the next id of
// refresh k-1, and the ids the transactions in progress may hold (the next
// id of the latest refresh whose mark is below theirs), with the same
// patience and the same going back when an old one ends. A sequence that
// hands out cached values (CACHE above 1) or cycles breaks the rule: the id
// floor then stays at the smallest bigint. A transaction in progress for
// longer than patience does not hold the id floor back either; until the
// next refresh sends the floor back to its ids, claims pass its id as one
// the floor passed (@passed_writers), and a claim whose snapshot sees it
// ended looks its keys up from the smallest id it may hold (IDFloor): a row
// it committed is never overtaken by a later row of its key.
//
// # The rescan
//
// Rows written without the guards (a session with session_replication_role
// = replica skips triggers) may break the rule. The rescan is the floors'
// safety net for them: every rescanEvery (a minute) it reads the oldest row
// a claim may take and the oldest row by id (the Rescan statement), and the
// next refresh lowers the floors to them, so such a row waits that long at
// most; or, while a rescan takes longer than a rescanShare-th of that,
// rescanShare times as long as the last rescan took. Lowering a floor is
// always safe, so the rescan runs beside the refreshes rather than as one
// of them. Under a pinned horizon it walks every dead entry of the due
// index and of the primary key: with the relay delivering 1,000 rows/s,
// 1.3 s (216k buffers) after two minutes of a pin and 5.7 s (893k) after
// ten. As one of the refreshes it held them up that long, and the claims
// walked the rows delivered meanwhile: in the minute of a 5.7 s rescan
// partitioned claims read 2.5k buffers, not 1.1k. It took a transaction id
// as well, so other relays' refreshes waited for it as for a writer. Now it
// takes none (it runs READ ONLY), and waits at least rescanShare times as
// long as the last one took, so that it keeps to a share of one
// connection's time. It follows the refreshes' pace: none is due until a
// refresh has run since the last, so an idle outbox, whose refreshes back
// off with its claims, rescans no more often than it refreshes.
//
// # Pace
//
// Refreshes run in a loop of their own, every refreshEvery (100 ms) while
// claims find rows (State.Found) and every refreshIdleEvery (a second)
// otherwise, or once every refreshIdleClaims (10) claims of an idle relay
// that backs off (Config.IdlePause): an idle relay costs one statement a
// second more at most, so that a claim never waits for one (a refresh from
// the oldest row under a pinned horizon walks every dead entry); a claim
// uses the floor as it is, as any floor the relay computed stays safe, only
// less useful, while it ages. Each refresh takes a transaction id, as a
// claim that leases rows does. A refresh or a rescan that fails leaves the
// floors where they were, and is logged once, then at growing intervals
// while they keep failing.
//
// # What every claim strategy must do
//
// The floors are safe only if every statement that bounds a walk by them
// plays its part. A claim strategy (a delivery mode) must:
//
//  1. Bound available_at below by the floor: its walks of the due indexes
//     state available_at >= @floor::timestamptz, with @floor from
//     State.Current (-infinity before the first refresh, and while the
//     floor is "any time"). The gauges that walk the due index do the
//     same. A claim that leases rows calls State.Found, so that refreshes
//     come sooner while rows flow. The strategy never moves a row's
//     available_at earlier, and a row it takes out of its claims' reach
//     becomes claimable again only by an update that sets available_at to
//     the time of that update at the earliest, after its transaction took
//     its id (the relay's promotedAt): the rule holds for it as for a row
//     inserted then.
//  2. Look a key's ids up from the id floor: the lookups of a key's oldest
//     rows start at IDFloor, an expression of @id_floor, @passed_writers and
//     @passed_ids (State.IDs, in that order), never at @id_floor alone: a
//     transaction the floor passed that has ended as the statement's
//     snapshot sees it may have committed rows below the id floor, and a
//     later row of their key must not go first.
//  3. Give the oldest-claimable fragment: the text that fills the {oldest}
//     slot of the Refresh and Rescan statements (Render). It is an
//     expression that returns the oldest available_at at or above
//     @start::timestamptz of a row the strategy's claims may take (NULL
//     when none), each part walking an index in available_at order and
//     stopping at its first entry (ORDER BY available_at LIMIT 1), as the
//     claim plan (Config.ClaimPlan) has it walk. It may hold {schema}.
//
// A strategy whose claims may take any row gives the oldest row:
//
//	(SELECT available_at FROM {schema}.messages
//	  WHERE available_at >= @start::timestamptz
//	  ORDER BY available_at
//	  LIMIT 1)
//
// and ordered mode the least of its two indexes' oldest rows (the
// candidates, and the rows without a key), leaving out the rows that wait
// on their key (item 1 says why that is safe).
package floor
