package relay

// The statements of ordered mode (ordered.go), which claims a keyed row
// only as its key's head (its oldest row), in a head's run, or behind the
// key's rows in flight in the claiming relay. Slots and arguments as in
// sql.go.
//
// The protocol. A keyed row is a candidate (waiting is false) from its
// insert on. A claim walks the candidates that are due, through
// messages_heads_due_idx, from the claim floor; of those, it leases the
// ones that are their key's oldest row (with the rows that follow them:
// their runs), and the first of a key whose older rows are all in flight
// in its own relay (below), and marks the others waiting, which takes them out of that
// index: no claim walks them again while the rows before them are in
// flight or back off. The settle that deletes a key's rows (delivered, or
// dead-lettered) makes the key's next waiting row a candidate again
// (queryHeadsPromote). So a claim's cost follows the candidates, not the
// rows queued behind keys in flight, and nothing is written per key but
// the rows themselves (a marked row is written twice more: marked, then
// made a candidate again): while another session pins the MVCC horizon,
// the dead entries of delivered rows lie below the floors.
//
// A claim does not wait for the settle behind its own relay's rows: a
// candidate whose key's oldest row is in flight in this relay (@relay_id,
// under a lease that still runs, a first attempt), and whose previous row
// in its key is too, is leased with its run like a head (continued), and
// names that row (after), which the relay sends it behind
// (relay/internal/keychain). No other relay can take a row of that key
// while its oldest row is leased here, and a row this relay leased had
// every older row of its key it could see in flight here or gone (a row
// committed late, with an id below rows already claimed, is sent out of
// id order, as it always was), so its link passes only once they all did.
// Only keys the relay's chains hold are continued (@keys_in_flight): rows
// leased under this relay's id by a process before it (a restart with the
// same RELAY_ID) have no link here, and a row named after one would be
// released two seconds later, leased again by the next claim, and so on
// until that lease ran out; such a key's rows are marked instead.
//
// Why no row is left waiting behind nothing. A claim marks a row waiting
// only while it holds a KEY SHARE lock on the older row it found (SKIP
// LOCKED: a row being deleted is not locked, and its followers stay
// candidates), and keeps that lock until it commits. The settle deletes a
// head, which waits for such locks, and only then, in a statement of its
// own with a snapshot taken after the delete, looks for the key's next
// waiting row: it sees every mark of a claim that locked the head, and a claim
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

// queryHeadsLockFree tells whether no claim of heads holds the schema's
// heads lock (@heads_lock) at this moment: it takes the lock and, the
// statement being a transaction of its own, lets it go at once. A claim of
// heads asks first and, when the lock is taken, does not run: during a
// backlog most claims of heads find another relay's claim under way, and
// each such claim cost the relay the keys it holds in flight written out
// (up to 64 KiB) and PostgreSQL that object parsed and the claim's plan of
// some 200 nodes started and run to nothing, about 1 ms of its CPU, where
// this costs a twentieth of it. The answer may be stale by the time the
// claim runs, which takes the lock itself (patience) and finds nothing
// when it lost the race, as before.
const queryHeadsLockFree = `SELECT pg_try_advisory_xact_lock(hashtext(@heads_lock))`

// queryHeadsClaim leases the due heads among up to @walk due candidates,
// oldest first, each with the rows that follow it in its key (its run),
// and marks waiting the candidates an older row of their key holds up (see
// the protocol above), unless that row is among the due candidates itself
// or was leased less than @mark_after ago (its lease ends later than
// @lease - @mark_after from now): its delivery is under way, and will most
// likely end before another claim comes, so the rows behind it are walked
// again rather than written twice (marked, then made candidates again). A
// 1000-key backlog drained at half the speed with every such row marked. A
// row whose older row is slower than that, or backs off, is marked, so the
// rows behind a key keep other keys' heads out of the claims' walk for
// @mark_after at most, plus the claim loop's pause when a claim found
// nothing and no settle woke it. A candidate is walked through
// messages_heads_due_idx from the claim floor (@floor), skipping rows other
// claims hold locked or leased and rows whose sink (@default_sink for rows
// without a destination) is in @closed_sinks, each locked FOR NO KEY
// UPDATE, which lets other claims take their KEY SHARE locks. The key's
// oldest row is looked up once per key (ofKey, from the id floor); a
// candidate that is it is a head. The keys that hold candidates up are
// found first (blocked, a key per blocker, materialized), then the
// candidates by key: joined in one statement, the planner, which expects
// a row or two from each, walked candidates and blockers in nested loops
// with the keys' oldest rows inside, 10 million loops and 1.4 s for 250
// candidates (estimates of a table without statistics: a generation of
// the hot table that has just become current). The oldest rows that are
// not candidates the walk locked are locked FOR KEY SHARE SKIP LOCKED
// (blockers); a candidate that is its key's oldest row is a head as the
// walk locked it, FOR NO KEY UPDATE, which a settle's delete waits for as
// for a KEY SHARE lock (when heads were locked in blockers as well, each
// cost a primary-key lookup more: 0.5 ms a claim of 250 heads). A key's oldest row
// that the walk did not reach is a head too (beyond), when it is a
// candidate, due, not leased and its sink open, locked FOR NO KEY UPDATE
// SKIP LOCKED by primary key and those conditions checked again on the
// version the lock returns: a settle makes a key's next row a candidate
// with the clock's available_at (promotedAt), after the rows behind it,
// and behind a backlog the walk met only those (marking them, a claim
// after another, each mark a write that a pinned horizon keeps) before it
// reached any head. The rows behind a head leased now are not marked.
//
// A key's first candidate in the walk whose key's oldest row is leased by
// this relay (@relay_id) under a lease that still runs, on a first attempt
// (a retried row goes alone, below, and so do the rows behind it), and
// whose key the relay's chains hold (@keys_in_flight, the protocol above),
// is a head as well (continued), when the key's live row just before it (p, a backward
// probe of messages_key_idx from the candidate down to the oldest row,
// where it stops at the latest) is this relay's under a running lease too:
// it is leased with its run, and returns p's id as after, so that the
// relay sends it once p passed and releases it unsent when p did not
// (keychain.Row.After). Without it, the rows behind a key in flight here
// waited for the settle, its promotion and the next claim: with 100 hot
// keys, four relays in one process drained a 200k burst at 27.4k events/s
// against 21.3k (docs/benchmarks.md). The rows of such a key are not
// marked by this claim (blocked leaves the key out): a row is never both
// marked and leased by one statement.
//
// A head's run is the rows after it in its key's id order (through
// messages_key_idx, from the head on: the key's delivered rows lie before
// it), waiting or not, as long as each is due, not leased, bound for the
// head's sink and locked by this claim (FOR NO KEY UPDATE SKIP LOCKED, by
// primary key alone, then those conditions checked again on the latest
// version the lock returns: with them in the lock's scan, the planner
// walked messages_due_idx instead, 196k buffers for 306 rows): the first
// that is not ends the run, which therefore never skips a row of the key.
// Each follower meets its locked version by grouping both by id, not by a
// join: the planner, which expects a row or two from each, joined them in
// nested loops, a million loops and most of a second for a claim of 1,000
// rows.
// A head that failed before (its last_error is set: it is retried) goes
// alone: with its run, each retry would write the rows behind it three
// times more (leased, released, marked waiting again).
// Only the claim that holds a key's head locks its run (no other relay's
// claim leases a row of a key whose older row exists), and the rows are
// delivered one after the other (deliverInKeyOrder), so a key is still
// sent in insert order, one event at a time, but a hot key's backlog goes
// out a run per claim rather than a row per claim and settle: with 100 hot
// keys, a relay that had fallen behind could not catch up. Each run holds
// up to @limit over the number of heads rows; the heads, then each run's
// next rows, round by round, fill the claim up to @limit rows and the
// byte budget (@byte_budget, @oversized as in withinBytes). A run's rows
// that were waiting become candidates again as they are leased
// (unwaitRows), so that no leased row is ever waiting: the settles' promotions
// (queryHeadsPromote) update only rows no settle deletes, and two settles
// of one run's rows, each promoting the row after it, lock that row in
// the same order, never in a cycle. (Left waiting, a run's rows were the
// oldest waiting rows of their key while in flight: the settle of a
// run's first rows promoted rows that the settle of its last rows was
// deleting, and the other way round, a deadlock a second.)
//
// One claim of heads at a time per schema: a claim takes the schema's
// heads lock (@heads_lock, a transaction-level advisory lock) first, and a
// claim that finds another relay's claim holding it walks nothing and
// leases nothing (patience yields no row): it comes back at its loop's
// next turn. A relay asks before it claims (queryHeadsLockFree), and does
// not run a claim that would find the lock taken. Claims that overlapped met each other's heads, locked but
// not yet leased, as heads nobody held, and marked the rows behind them
// waiting (each mark an update that is never HOT: waiting is in two
// index predicates, and the lease then clears it, another), and with hot
// keys nine claims in ten walked and locked 250 rows to find nothing: 100
// hot keys, four relays in one process, drained at 10.8-11.5k events/s
// against 5.8-6.8k, with PostgreSQL CPU 8.8-9.3 s per 100k rows against
// 21-24 s; 5,000 keys as fast as before (15.7-17.7k against 15.8-17.9k)
// with less CPU (5.8-6.5 s against 7.0-7.6 s). A claim's transaction may
// stay open after the statement (the sampled claims read their statistics
// before they commit): a relay frozen there would hold the lock, and stop
// every relay's claims of heads, until its connection died, so the claim
// sets idle_in_transaction_session_timeout (5 s) for its transaction, as
// the mode switch and the buckets' rounds do for their locks. A claim
// that finds the lock taken pauses as after an empty claim: a poll
// interval by default (RELAY_IDLE_POLL_INTERVAL, when set longer, lets
// that pause grow); the claims of all the relays of a schema thus take
// turns, so a claim slowed down (a pinned horizon) holds up the others'.
//
// A claim waits for a lock once it has started only where SKIP LOCKED does
// not skip: when a lock follows a row's update chain to a version another
// transaction is changing. That transaction may be a settle whose delete
// waits for this claim's KEY SHARE locks: a deadlock, which PostgreSQL
// breaks after deadlock_timeout (1 s; five in three minutes with 100 hot
// keys). The claim therefore sets its own lock_timeout first (@lock_wait,
// patience: a one-time filter of the walk) and gives up instead
// (ordered.claim takes that for an empty claim). Its rows are leaseRows',
// then a NULL (where other claims report held keys), then after: looked
// up in continued only for the rows found there (a join of the leased
// rows with continued cost 1.2 ms a claim of 1,000 rows, a tenth).
// Measured with the statement alone under pgbench: 250 heads and their
// runs, 11.7-12.2 ms a claim against 12.1-13.0 ms before continued, whose
// cost those two changes more than pay.
var queryHeadsClaim = `
WITH patience AS MATERIALIZED (
    SELECT set_config('lock_timeout', @lock_wait, true) AS lock_timeout,
           set_config('idle_in_transaction_session_timeout', '5000', true) AS idle_timeout
     WHERE pg_try_advisory_xact_lock(hashtext(@heads_lock))
), due AS MATERIALIZED (
    SELECT c.id, c.leased_by, c.available_at, ` + payloadSize("c") + ` AS size, c.key,
           coalesce(c.destination, @default_sink) AS sink, c.last_error IS NULL AS fresh
      FROM {schema}.messages_all AS c
     WHERE (SELECT lock_timeout FROM patience) IS NOT NULL
       AND c.key IS NOT NULL AND NOT c.waiting
       AND c.available_at <= now()
       AND c.available_at >= @floor::timestamptz
       AND ` + leaseOver + `
       AND coalesce(c.destination, @default_sink) <> ALL (@closed_sinks::text[])
     ORDER BY c.available_at, c.id
     LIMIT @walk
       FOR NO KEY UPDATE SKIP LOCKED
), oldest AS MATERIALIZED (
    SELECT k.key,
           (SELECT o.id FROM {schema}.messages_all AS o
             WHERE ` + ofKey("o", "k.key") + `
             ORDER BY o.key, o.id LIMIT 1) AS id
      FROM (SELECT DISTINCT key FROM due) AS k
), blockers AS MATERIALIZED (
    SELECT b.id, b.key, b.leased_by, b.leased_until, b.available_at, b.waiting, b.last_error IS NULL AS fresh
      FROM {schema}.messages_all AS b
     WHERE b.id = ANY (ARRAY(SELECT id FROM oldest WHERE id IS NOT NULL EXCEPT SELECT id FROM due))
       FOR KEY SHARE SKIP LOCKED
), continued AS MATERIALIZED (
    SELECT d.id, d.leased_by, d.available_at, d.size, d.key, d.sink, d.fresh, p.id AS after
      FROM (SELECT DISTINCT ON (d.key) d.*, b.id AS oldest
              FROM due AS d
              JOIN blockers AS b ON b.key = d.key
             WHERE b.leased_by = @relay_id AND ` + leaseRunning("b") + ` AND b.fresh
               AND @keys_in_flight::jsonb ? d.key
             ORDER BY d.key, d.id) AS d
     CROSS JOIN LATERAL (
           SELECT o.id, (o.leased_by = @relay_id AND ` + leaseRunning("o") + `) IS TRUE AS ours
             FROM {schema}.messages_all AS o
            WHERE o.key IS NOT NULL AND (o.key, o.id) < (d.key, d.id) AND (o.key, o.id) >= (d.key, d.oldest)
            ORDER BY o.key DESC, o.id DESC LIMIT 1) AS p
     WHERE p.ours
), beyond AS MATERIALIZED (
    SELECT x.id, x.leased_by, x.available_at, ` + payloadSize("x") + ` AS size, x.key,
           coalesce(x.destination, @default_sink) AS sink, x.last_error IS NULL AS fresh, x.waiting, x.leased_until
      FROM {schema}.messages_all AS x
     WHERE x.id = ANY (ARRAY(
           SELECT b.id FROM blockers AS b
            WHERE NOT b.waiting AND b.available_at <= now() AND ` + leaseOver + `
              AND b.id <> ALL (ARRAY(SELECT id FROM due))))
       FOR NO KEY UPDATE SKIP LOCKED
), heads AS MATERIALIZED (
    SELECT d.id, d.leased_by, d.available_at, d.size, d.key, d.sink, d.fresh
      FROM due AS d
     WHERE d.id = ANY (ARRAY(SELECT id FROM oldest))
     UNION ALL
    SELECT x.id, x.leased_by, x.available_at, x.size, x.key, x.sink, x.fresh
      FROM beyond AS x
     WHERE x.key IS NOT NULL AND NOT x.waiting AND x.available_at <= now() AND ` + leaseOver + `
       AND x.sink <> ALL (@closed_sinks::text[])
     UNION ALL
    SELECT c.id, c.leased_by, c.available_at, c.size, c.key, c.sink, c.fresh
      FROM continued AS c
), followers AS MATERIALIZED (
    SELECT f.id, h.id AS head, h.available_at AS head_at, f.pos, f.size,
           bool_and(f.ok) OVER (PARTITION BY h.id ORDER BY f.pos) AS unbroken
      FROM (SELECT * FROM heads WHERE fresh) AS h
     CROSS JOIN LATERAL (
           SELECT r.id, ` + payloadSize("r") + ` AS size,
                  row_number() OVER (ORDER BY r.key, r.id) AS pos,
                  r.available_at <= now() AND ` + leaseOver + `
                  AND coalesce(r.destination, @default_sink) = h.sink AS ok
             FROM {schema}.messages_all AS r
            WHERE r.key IS NOT NULL AND (r.key, r.id) > (h.key, h.id) AND (r.key, r.id) <= (h.key, 9223372036854775807)
            ORDER BY r.key, r.id
            LIMIT (SELECT ceil(@limit::float8 / greatest(count(*), 1))::bigint - 1 FROM heads)) AS f
), locked AS MATERIALIZED (
    SELECT l.id, l.leased_by, l.available_at <= now() AND ` + leaseOver + ` AS ok
      FROM {schema}.messages_all AS l
     WHERE l.id = ANY (ARRAY(SELECT id FROM followers WHERE unbroken))
       FOR NO KEY UPDATE SKIP LOCKED
), runs AS MATERIALIZED (
    SELECT h.id, h.leased_by, h.size, 0 AS pos, h.available_at AS head_at, h.id AS head
      FROM heads AS h
     UNION ALL
    SELECT s.id, s.leased_by, s.size, s.pos, s.head_at, s.head FROM (
        SELECT v.*, count(*) FILTER (WHERE v.ok) OVER (PARTITION BY v.head ORDER BY v.pos) = v.pos AS unbroken
          FROM (SELECT u.id, max(u.leased_by) AS leased_by, max(u.size) AS size, max(u.pos) AS pos,
                       max(u.head_at) AS head_at, max(u.head) AS head, bool_or(u.ok) AS ok
                  FROM (SELECT f.id, NULL AS leased_by, f.size, f.pos, f.head_at, f.head, false AS ok
                          FROM followers AS f
                         WHERE f.unbroken
                         UNION ALL
                        SELECT l.id, l.leased_by, NULL, NULL, NULL, NULL, l.ok
                          FROM locked AS l) AS u
                 GROUP BY u.id) AS v) AS s
     WHERE s.unbroken
), claimable AS MATERIALIZED (
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER w AS upto,
               row_number() OVER w AS n
          FROM runs
        WINDOW w AS (ORDER BY pos, head_at, head)) AS s
     WHERE n <= @limit AND (upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool))
), blocked AS MATERIALIZED (
    SELECT o.key, b.id
      FROM oldest AS o
      JOIN blockers AS b ON b.id = o.id
     WHERE b.id <> ALL (ARRAY(SELECT id FROM due))
       AND b.id <> ALL (ARRAY(SELECT id FROM heads))
       AND o.key <> ALL (ARRAY(SELECT key FROM continued))
       AND NOT coalesce(b.leased_until > now() + @lease::interval - @mark_after::interval
                        AND b.leased_until <= now() + @lease::interval, false)
), marked AS (
    UPDATE {schema}.messages_all AS m
       SET waiting = true
     WHERE m.id = ANY (ARRAY(
           SELECT d.id FROM due AS d
             JOIN blocked AS x ON x.key = d.key
            WHERE d.id > x.id))
)` + leaseRowsAlso("claimable", noBucket, unwaitRows, " AND (NOT m.waiting OR "+withXactID+")") + `, NULL::text AS held_key,
           CASE WHEN m.id = ANY (ARRAY(SELECT id FROM continued))
                THEN (SELECT c.after FROM continued AS c WHERE c.id = m.id) END AS after`

// unwaitRows makes a run's waiting rows candidates again as they are
// leased (queryHeadsClaim), with the available_at of a promotion, after
// the claim took its transaction's id (withXactID, asked for by a waiting
// row only: as a condition of every row it was evaluated once, first, and
// every claim took an id, an idle relay's empty ones too). One released
// later, after an older row of its key failed, is a candidate above the
// claim floor, which the next claim to walk it marks waiting again. A row
// that was a candidate keeps its available_at, and its lease stays a HOT
// update.
const unwaitRows = `,
           waiting = false,
           available_at = CASE WHEN m.waiting THEN ` + promotedAt + ` ELSE m.available_at END`

// oldestCandidate fills queryFloor's {oldest} in ordered mode: the oldest
// candidate or row without a key at or above @start, through
// messages_heads_due_idx and messages_unkeyed_due_idx, leaving out the rows
// waiting on their key. A waiting row becomes a candidate again only by an
// update that moves its available_at to the time of the update at the
// earliest (promotedAt), after its transaction has its id: the floor's rule
// (relay/internal/floor) holds for it as for a row inserted then.
const oldestCandidate = `least(
           (SELECT available_at FROM {schema}.messages_all
             WHERE key IS NOT NULL AND NOT waiting AND available_at >= @start::timestamptz
             ORDER BY available_at
             LIMIT 1),
           (SELECT available_at FROM {schema}.messages_all
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

// queryHeadsPromote makes the next waiting row of each of @keys a
// candidate again: the settle runs it after deleting rows of those keys,
// as a statement of its own in the same READ COMMITTED transaction (the
// protocol above). The transaction has its id from the delete, unless
// every delete was dropped (lost leases): withXactID takes it first then.
// It looks each key's row up in messages_waiting_idx, which holds only
// the rows that wait, above the oldest row of the key the settle deleted
// (@after, per key): a row waits only behind an older row, and a key's
// head is leased only with no older row, so no row of the key below it
// waits. (Not above the newest: a row committed late, with an id inside a
// run that its claim could not see, waits behind the run's head.) Most
// settles find none there, and read a page or two;
// the dead entries of the key's earlier waiting rows lie below, off the
// path (from the id floor, the promotions under a pin read 4k buffers a
// settle). It promotes whether or not rows of the key are still in flight
// between the two (the rest of a run, settled later): only the settle
// that deleted the row a claim's mark was locked behind is sure to see
// that mark, so it cannot leave the promotion to another. A candidate that
// an older row of its key still holds up (the rest of a run, a settle
// dropped for a lost lease, a row committed late, a row put back) is
// marked waiting again by the next claim that walks it.
var queryHeadsPromote = `
UPDATE {schema}.messages_all AS m
   SET waiting = false, available_at = ` + promotedAt + `
 WHERE m.id = ANY (ARRAY(
       SELECT (SELECT q.id FROM {schema}.messages_all AS q
                WHERE q.waiting AND q.key IS NOT NULL
                  AND (q.key, q.id) > (k.key, k.after) AND (q.key, q.id) <= (k.key, 9223372036854775807)
                ORDER BY q.key, q.id LIMIT 1)
         FROM unnest(@keys::text[], @after::bigint[]) AS k(key, after)))
   AND ` + stillWaiting + ` AND ` + withXactID

// stillWaiting is the check that a row the promotion or the repair found
// waiting still is, on the version they update, written so that it does
// not match messages_waiting_idx's predicate (waiting): the planner, which
// on statistics taken while few rows waited reckons that index nearly
// empty, then scanned all of it for the ids found rather than look them
// up by primary key, and under a pinned horizon it holds an entry for
// every row ever marked waiting (3.5k buffers a settle on average, most of
// the pinned database's time, seven minutes into a pin). The column is NOT NULL:
// coalesce changes nothing but the plan.
const stillWaiting = `coalesce(m.waiting, false)`

// queryHeadsRepair makes a candidate again each waiting row, up to @cap,
// that no older row of its key holds up, and returns their keys. The
// settles leave none (the protocol above); a head deleted by hand, or a
// row written with waiting set by a session that skips triggers, does.
//
// Only the first waiting row of a key can be such a row (every later one
// waits behind it), so the repair looks at one row per key: it steps from
// key to key through messages_waiting_idx (first_waiting, one index descent
// a key), and looks for an older row of each from the id floor, as the
// claims do. It looked for an older row of every waiting row before: under
// a pinned horizon, with a backlog of waiting rows on a hundred hot keys,
// each of those lookups walked its key's dead entries, and the statement
// ran for minutes, holding a transaction id from its start (withXactID)
// that every snapshot in the cluster then kept as its xmin, so that it
// pinned the horizon of every database on the server, the unpinned ones
// too (docs/benchmarks.md, "Ordered mode under a pin").
var queryHeadsRepair = `
UPDATE {schema}.messages_all AS m
   SET waiting = false, available_at = ` + promotedAt + `
 WHERE m.id = ANY (ARRAY(
       WITH RECURSIVE first_waiting AS (
           (SELECT x.key, x.id FROM {schema}.messages_all AS x
             WHERE x.waiting
             ORDER BY x.key, x.id
             LIMIT 1)
           UNION ALL
           SELECT n.key, n.id
             FROM first_waiting AS f,
                  LATERAL (SELECT x.key, x.id FROM {schema}.messages_all AS x
                            WHERE x.waiting AND x.key > f.key
                            ORDER BY x.key, x.id
                            LIMIT 1) AS n
       )
       SELECT f.id FROM first_waiting AS f
        WHERE NOT EXISTS (SELECT 1 FROM {schema}.messages_all AS o
                           WHERE ` + ofKey("o", "f.key") + ` AND o.id < f.id)
        LIMIT @cap))
   AND ` + stillWaiting + ` AND ` + withXactID + `
RETURNING m.key`

// queryHeadsReset makes every row a candidate, when the schema switches to
// ordered mode: rows marked waiting in an earlier spell of ordered mode may
// have lost the rows before them in another mode.
var queryHeadsReset = `
UPDATE {schema}.messages_all AS m SET waiting = false, available_at = ` + promotedAt + ` WHERE m.waiting AND ` + withXactID

// queryHeadsBacklog counts the rows due per sink (@default_sink names the
// default sink): rows without a key that are due, and candidates that are
// due; rows waiting behind their key's head are not due (a candidate not
// yet found behind an older row counts until a claim does). Each part
// walks its index from the claim floor (@floor) and stops at @cap rows. It
// also returns the oldest due time of each sink.
var queryHeadsBacklog = `
WITH unkeyed AS (
    SELECT destination, available_at FROM {schema}.messages_all
     WHERE key IS NULL AND available_at <= now() AND available_at >= @floor::timestamptz AND ` + leaseOver + `
     ORDER BY available_at
     LIMIT @cap
), heads AS (
    SELECT destination, available_at FROM {schema}.messages_all
     WHERE key IS NOT NULL AND NOT waiting
       AND available_at <= now() AND available_at >= @floor::timestamptz AND ` + leaseOver + `
     ORDER BY available_at
     LIMIT @cap
)
SELECT coalesce(destination, @default_sink), count(*), min(available_at)
  FROM (SELECT * FROM unkeyed UNION ALL SELECT * FROM heads) AS due
 GROUP BY 1`

// queryHeadsBlocked returns the keys whose head failed and waits for its
// retry (candidates that failed, are not due now and are not leased, up to
// @heads_cap) and the rows that wait behind their key's head (up to
// @cap). The heads are found through messages_retry_idx, which holds only
// the rows that failed (last_error is set): planned on stale statistics,
// with nothing but key IS NOT NULL to go by, the count read every keyed row
// through messages_key_idx, under a pinned horizon every version it kept
// (489k entries and 102k buffers, 2 s, every gauge refresh, ten minutes
// into a pin).
var queryHeadsBlocked = `
SELECT (SELECT count(*) FROM (
           SELECT 1 FROM {schema}.messages_all
            WHERE last_error IS NOT NULL AND available_at > now()
              AND key IS NOT NULL AND NOT waiting AND attempts > 0 AND leased_by IS NULL
            LIMIT @heads_cap) AS h),
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.messages_all WHERE waiting LIMIT @cap) AS w)`
