package relay

// The statements of ordered mode (ordered.go), which claims a keyed row
// only as its key's head: its oldest row. Slots and arguments as in
// sql.go.
//
// The protocol. A keyed row is a candidate (waiting is false) from its
// insert on. A claim walks the candidates that are due, through
// messages_heads_due_idx, from the claim floor; of those, it leases the
// ones that are their key's oldest row, and marks the others waiting,
// which takes them out of that index: no claim walks them again while the
// rows before them are in flight or back off. The settle that deletes a
// key's head (delivered, or dead-lettered) makes the key's oldest row left
// a candidate again (queryHeadsPromote). So a claim's cost follows the
// candidates, not the rows queued behind heads in flight, and nothing is
// written per delivered row but the rows themselves: while another session
// pins the MVCC horizon, their dead entries lie below the floors.
//
// Why no row is left waiting behind nothing. A claim marks a row waiting
// only while it holds a KEY SHARE lock on the older row it found (SKIP
// LOCKED: a row being deleted is not locked, and its followers stay
// candidates), and keeps that lock until it commits. The settle deletes a
// head, which waits for such locks, and only then, in a statement of its
// own with a snapshot taken after the delete, looks for the key's oldest
// row left: it sees every mark of a claim that locked the head, and a claim
// that came after the delete cannot lock the head, so marks nothing behind
// it. Within one statement the settle would decide on a snapshot taken
// before a claim it waited for had committed, and leave that claim's row
// waiting for ever. A row deleted otherwise (by hand) strands the rows
// behind it until the repair (queryHeadsRepair), every minute.

// unkeyedOnly restricts queryMessagesClaim to rows without a key (its
// {only} slot): keyed rows are claimed as heads, and this condition lets
// the claim walk messages_unkeyed_due_idx, which holds no keyed row.
const unkeyedOnly = `
       AND c.key IS NULL`

// queryHeadsClaim leases the due heads among up to @limit due candidates,
// oldest first, and marks waiting the candidates an older row of their key
// holds up (see the protocol above), unless that row is among the due
// candidates itself or was leased less than @mark_after ago (its lease
// ends later than @lease - @mark_after from now): its delivery is under
// way, and will most likely end before another claim comes, so the rows
// behind it are walked again rather than written twice (marked, then made
// candidates again). A 1000-key backlog drained at half the speed with
// every such row marked. A row whose older row is slower than that, or
// backs off, is marked, so the rows behind a key keep other keys' heads
// out of the claims' walk for @mark_after at most, plus the claim loop's
// pause when a claim found nothing and no settle woke it. A candidate is walked through
// messages_heads_due_idx from the claim floor (@floor), skipping rows other
// claims hold locked or leased and rows whose sink (@default_sink for rows
// without a destination) is in @closed_sinks, each locked FOR NO KEY
// UPDATE, which lets other claims take their KEY SHARE locks. The key's
// oldest row is looked up once per key (ofKey, from the id floor); a
// candidate that is it is a head, and the heads within the @byte_budget
// (withinBytes) are leased. The heads are taken from the rows locked in
// blockers, so that the lock is taken before the lease: a row this
// statement has updated can no longer be locked by it. Its rows are
// leaseRows', then a NULL (where other claims report held keys).
//
// A claim waits for a lock once it has started only where SKIP LOCKED does
// not skip: when a lock follows a row's update chain to a version another
// transaction is changing. That transaction may be a settle whose delete
// waits for this claim's KEY SHARE locks: a deadlock, which PostgreSQL
// breaks after deadlock_timeout (1 s; five in three minutes with 100 hot
// keys). The claim therefore sets its own lock_timeout first (@lock_wait,
// patience: a one-time filter of the walk) and gives up instead
// (ordered.claim takes that for an empty claim).
var queryHeadsClaim = `
WITH patience AS MATERIALIZED (
    SELECT set_config('lock_timeout', @lock_wait, true) AS lock_timeout
), due AS MATERIALIZED (
    SELECT c.id, c.leased_by, c.available_at, octet_length(c.payload) AS size, c.key
      FROM {schema}.messages AS c
     WHERE (SELECT lock_timeout FROM patience) IS NOT NULL
       AND c.key IS NOT NULL AND NOT c.waiting
       AND c.available_at <= now()
       AND c.available_at >= @floor::timestamptz
       AND ` + leaseOver + `
       AND coalesce(c.destination, @default_sink) <> ALL (@closed_sinks::text[])
     ORDER BY c.available_at, c.id
     LIMIT @limit
       FOR NO KEY UPDATE SKIP LOCKED
), oldest AS MATERIALIZED (
    SELECT k.key,
           (SELECT o.id FROM {schema}.messages AS o
             WHERE ` + ofKey("o", "k.key") + `
             ORDER BY o.key, o.id LIMIT 1) AS id
      FROM (SELECT DISTINCT key FROM due) AS k
), blockers AS MATERIALIZED (
    SELECT b.id, b.leased_until FROM {schema}.messages AS b
     WHERE b.id = ANY (ARRAY(SELECT id FROM oldest WHERE id IS NOT NULL))
       FOR KEY SHARE SKIP LOCKED
), heads AS MATERIALIZED (
    SELECT d.id, d.leased_by, d.available_at, d.size
      FROM due AS d
     WHERE d.id = ANY (ARRAY(SELECT id FROM blockers))
), claimable AS MATERIALIZED (` + withinBytes("heads") + `
), marked AS (
    UPDATE {schema}.messages AS m
       SET waiting = true
     WHERE m.id = ANY (ARRAY(
           SELECT d.id FROM due AS d JOIN blockers AS b ON b.id = (SELECT o.id FROM oldest AS o WHERE o.key = d.key)
            WHERE d.id > b.id
              AND b.id <> ALL (ARRAY(SELECT id FROM due))
              AND NOT coalesce(b.leased_until > now() + @lease::interval - @mark_after::interval
                               AND b.leased_until <= now() + @lease::interval, false)))
), leased AS (` + leaseRows("claimable", noBucket) + `
)
SELECT *, NULL::text FROM leased`

// oldestCandidate fills queryFloor's {oldest} in ordered mode: the oldest
// candidate or row without a key at or above @start, through
// messages_heads_due_idx and messages_unkeyed_due_idx, leaving out the rows
// waiting on their key. A waiting row becomes a candidate again only by an
// update that moves its available_at to the time of the update at the
// earliest (promotedAt), after its transaction has its id: the floor's rule
// (floor.go) holds for it as for a row inserted then.
const oldestCandidate = `least(
           (SELECT available_at FROM {schema}.messages
             WHERE key IS NOT NULL AND NOT waiting AND available_at >= @start::timestamptz
             ORDER BY available_at
             LIMIT 1),
           (SELECT available_at FROM {schema}.messages
             WHERE key IS NULL AND available_at >= @start::timestamptz
             ORDER BY available_at
             LIMIT 1))`

// promotedAt is the available_at of a row that becomes a candidate again
// (the row m): its own, or the clock's when that is later, read after the
// transaction took its id: the settle's delete took it, and the other
// statements take it first (withXactID).
const promotedAt = `greatest(m.available_at, clock_timestamp())`

// withXactID is a condition that makes a statement take its transaction's
// id before it updates its first row (an InitPlan, evaluated once, first).
const withXactID = `(SELECT pg_current_xact_id()) IS NOT NULL`

// queryHeadsPromote makes the oldest waiting row of each of @keys a
// candidate again: the settle runs it after deleting their heads, as a
// statement of its own in the same READ COMMITTED transaction (the
// protocol above). The transaction has its id from the delete, unless
// every delete was dropped (lost leases): withXactID takes it first then.
// It looks the rows up from the id floor (ofKey) in messages_waiting_idx,
// which holds only the rows that wait: most settles find none there, and
// read a page or two. A candidate that an older row of its key still holds
// up (a settle dropped for a lost lease, a row committed late) is marked
// waiting again by the next claim that walks it.
var queryHeadsPromote = `
UPDATE {schema}.messages AS m
   SET waiting = false, available_at = ` + promotedAt + `
 WHERE m.id = ANY (ARRAY(
       SELECT (SELECT q.id FROM {schema}.messages AS q
                WHERE q.waiting AND ` + ofKey("q", "k.key") + `
                ORDER BY q.key, q.id LIMIT 1)
         FROM unnest(@keys::text[]) AS k(key)))
   AND m.waiting AND ` + withXactID

// queryHeadsRepair makes a candidate again each waiting row, up to @cap,
// that no older row of its key holds up, and returns their keys. The
// settles leave none (the protocol above); a head deleted by hand, or a
// row written with waiting set by a session that skips triggers, does.
// It walks messages_waiting_idx, and looks for older rows from the id
// floor, as the claims do.
var queryHeadsRepair = `
UPDATE {schema}.messages AS m
   SET waiting = false, available_at = ` + promotedAt + `
 WHERE m.id = ANY (ARRAY(
       SELECT x.id FROM {schema}.messages AS x
        WHERE x.waiting
          AND NOT EXISTS (SELECT 1 FROM {schema}.messages AS o
                           WHERE ` + ofKey("o", "x.key") + ` AND o.id < x.id)
        LIMIT @cap))
   AND m.waiting AND ` + withXactID + `
RETURNING m.key`

// queryHeadsReset makes every row a candidate, when the schema switches to
// ordered mode: rows marked waiting in an earlier spell of ordered mode may
// have lost the rows before them in another mode.
var queryHeadsReset = `
UPDATE {schema}.messages AS m SET waiting = false, available_at = ` + promotedAt + ` WHERE m.waiting AND ` + withXactID

// queryHeadsBacklog counts the rows due per sink (@default_sink names the
// default sink): rows without a key that are due, and candidates that are
// due; rows waiting behind their key's head are not due (a candidate not
// yet found behind an older row counts until a claim does). Each part
// walks its index from the claim floor (@floor) and stops at @cap rows. It
// also returns the oldest due time of each sink.
var queryHeadsBacklog = `
WITH unkeyed AS (
    SELECT destination, available_at FROM {schema}.messages
     WHERE key IS NULL AND available_at <= now() AND available_at >= @floor::timestamptz AND ` + leaseOver + `
     ORDER BY available_at
     LIMIT @cap
), heads AS (
    SELECT destination, available_at FROM {schema}.messages
     WHERE key IS NOT NULL AND NOT waiting
       AND available_at <= now() AND available_at >= @floor::timestamptz AND ` + leaseOver + `
     ORDER BY available_at
     LIMIT @cap
)
SELECT coalesce(destination, @default_sink), count(*), min(available_at)
  FROM (SELECT * FROM unkeyed UNION ALL SELECT * FROM heads) AS due
 GROUP BY 1`

// queryHeadsBlocked returns the keys whose head failed and waits for its
// retry (candidates not due now that have been tried and are not leased,
// up to @heads_cap) and the rows that wait behind their key's head (up to
// @cap).
var queryHeadsBlocked = `
SELECT (SELECT count(*) FROM (
           SELECT 1 FROM {schema}.messages
            WHERE key IS NOT NULL AND NOT waiting AND available_at > now()
              AND attempts > 0 AND leased_by IS NULL
            LIMIT @heads_cap) AS h),
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.messages WHERE waiting LIMIT @cap) AS w)`
