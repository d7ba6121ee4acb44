package relay

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// planPerExecution runs a statement as PostgreSQL's unnamed prepared
// statement, which is planned for the arguments of each execution (with the
// description cached by pgx, still one round trip). The claim and settle
// statements take arrays whose length decides the right plan; a cached
// generic plan does not know it and can be badly wrong.
const planPerExecution = pgx.QueryExecModeCacheDescribe

// Rows are untrusted: a producer may have written anything into the relay's
// columns (the messages_guard trigger resets them at insert, but a session
// with session_replication_role = replica skips triggers). The claims
// therefore never overflow a counter and read a lease that ends more than
// maxLease ahead, which no relay sets, as over.
const (
	// leaseOver holds for a row that no lease holds.
	leaseOver = `(leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '1 day')`
	// nextAttempt is attempts + 1, kept below the integer's range.
	nextAttempt = `least(greatest(m.attempts, 0), 1000000) + 1`
	// nextClaimSeq is claim_seq + 1, wrapping before the integer's range
	// ends: the fencing token needs only to differ from the last claim's.
	nextClaimSeq = `CASE WHEN m.claim_seq >= 2147483646 OR m.claim_seq < 0 THEN 1 ELSE m.claim_seq + 1 END`
)

// withinBytes selects, from the rows of the CTE from (id, leased_by,
// available_at, size), oldest first, those whose payloads add up to at most
// the byte budget (parameter budget), and the first row whatever its size
// when parameter oversized is true (the relay holds nothing else): a claim
// never leases more payload bytes than the relay may hold, and a single row
// larger than the whole budget still goes, alone.
func withinBytes(from, budget, oversized string) string {
	return `
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM ` + from + `) AS s
     WHERE upto <= ` + budget + `::bigint OR (n = 1 AND ` + oversized + `::bool)`
}

// noBucket is the bucket leaseRows returns outside partitioned mode.
const noBucket = "0"

// leaseRows leases the rows whose ids the CTE from holds (id, leased_by:
// set when the row's lease had expired) to relay $1 for $5, and returns
// what both claims return per row: the message, its attempt and claim_seq,
// whether it was rescued from an expired lease, and whether its idempotency
// key was already delivered (a LIMIT 1 subquery, so that the planner probes
// the index per row instead of hashing the whole key table; only for keys
// the producer chose, dedup: a generated key cannot have been delivered),
// and its bucket: the expression bucket, messages_bucket in partitioned
// mode and noBucket in the others, which need not pay for it on every row.
// It writes no indexed column, so the update is HOT.
func leaseRows(from, bucket string) string {
	return `
    UPDATE %[1]s.messages AS m
       SET attempts = ` + nextAttempt + `,
           claim_seq = ` + nextClaimSeq + `,
           leased_by = $1,
           leased_until = now() + $5::interval
     WHERE m.id = ANY (ARRAY(SELECT id FROM ` + from + `))
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, m.claim_seq,
           m.id = ANY (ARRAY(SELECT id FROM ` + from + ` WHERE leased_by IS NOT NULL)) AS rescued,
           CASE WHEN m.dedup
                THEN (SELECT true FROM %[1]s.delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL
                ELSE false END AS duplicate,
           ` + bucket + ` AS bucket`
}

// Every statement the relay runs. %[1]s is the quoted schema (and %[2]s,
// in the claim, the ordered-mode condition); queries are rendered once per
// Relay by renderQueries.

// queryMessagesClaim leases up to $4 due rows, oldest first, skipping rows
// other relays hold locked or leased and rows whose sink is in $3
// (unavailable or at capacity), and stopping before the payloads pass $6
// bytes (the first row goes whatever its size when $7; withinBytes). The
// update finds the rows by primary key from the locked set (an array, so
// that the planner cannot choose to scan and hash the whole table instead).
// Its rows are leaseRows', then a NULL (where queryLanesClaim reports empty
// lanes).
var queryMessagesClaim = `
WITH due AS MATERIALIZED (
    SELECT id, leased_by, available_at, octet_length(payload) AS size
      FROM %[1]s.messages AS c
     WHERE available_at <= now()
       AND ` + leaseOver + `
       AND coalesce(destination, $2) <> ALL ($3::text[])%[2]s
     ORDER BY available_at, id
     LIMIT $4
       FOR UPDATE SKIP LOCKED
), fits AS MATERIALIZED (` + withinBytes("due", "$6", "$7") + `
), leased AS (` + leaseRows("fits", noBucket) + `
)
SELECT *, NULL::text FROM leased`

// unkeyedClaimCondition restricts a claim to rows without a key: in ordered
// mode keyed rows are claimed through their lanes (queryLanesClaim), and
// this condition lets the claim walk messages_unkeyed_due_idx, which holds
// no keyed row.
const unkeyedClaimCondition = `
       AND c.key IS NULL`

// queryLanesClaim, in ordered mode, leases the heads of up to $4 due lanes:
// the oldest row of each key, when it is due, not leased, and its sink ($2
// names the default) is not in $3. Lanes are locked SKIP LOCKED, so
// concurrent claims take different keys and at most one message per key is
// in flight. Each lane it looked at moves out of the due range: to the end
// of the lease when its head was claimed (so that an expired lease makes it
// due again), to its head's available_at when the head waits (delayed, in
// backoff), to the end of the head's lease when another claim holds it, and
// $6 ahead when the head's sink is closed. A lane whose head did not fit in
// the $7 bytes this claim may take (the first goes whatever its size when
// $8; withinBytes) stays due, in its place, for the claim after the next
// settle. Its rows are those of
// queryMessagesClaim, then one row per lane that has no head left, with
// only the last column, that lane's key, set: the caller prunes them
// (lanes_prune). The cost follows the lanes claimed, not the rows queued
// behind heads in flight.
var queryLanesClaim = `
WITH due_lanes AS MATERIALIZED (
    SELECT l.key
      FROM %[1]s.lanes AS l
     WHERE l.available_at <= now()
     ORDER BY l.available_at
     LIMIT $4
       FOR NO KEY UPDATE SKIP LOCKED
), heads AS MATERIALIZED (
    SELECT d.key, h.id, h.available_at, h.leased_until,
           coalesce(h.destination, $2) <> ALL ($3::text[]) AS open
      FROM due_lanes AS d
      LEFT JOIN LATERAL (
           SELECT m.id, m.available_at, m.leased_until, m.destination
             FROM %[1]s.messages AS m
            WHERE m.key = d.key
            ORDER BY m.id
            LIMIT 1
      ) AS h ON true
), locked AS MATERIALIZED (
    SELECT m.id, m.leased_by, m.available_at, octet_length(m.payload) AS size
      FROM %[1]s.messages AS m
     WHERE m.id = ANY (ARRAY(
           SELECT id FROM heads
            WHERE id IS NOT NULL AND open AND available_at <= now()
              AND ` + leaseOver + `))
       FOR UPDATE SKIP LOCKED
), claimable AS MATERIALIZED (` + withinBytes("locked", "$7", "$8") + `
), leased AS (` + leaseRows("claimable", noBucket) + `
), moved AS (
    UPDATE %[1]s.lanes AS l
       SET available_at = CASE
               WHEN h.id = ANY (ARRAY(SELECT id FROM claimable)) THEN now() + $5::interval
               WHEN h.id = ANY (ARRAY(SELECT id FROM locked)) THEN l.available_at
               WHEN h.available_at > now() THEN h.available_at
               WHEN h.leased_until > now() THEN least(h.leased_until, now() + $5::interval)
               ELSE now() + $6::interval
           END
      FROM heads AS h
     WHERE l.key = h.key AND h.id IS NOT NULL
)
SELECT id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, claim_seq,
       rescued, duplicate, bucket, NULL::text
  FROM leased
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, key
  FROM heads
 WHERE id IS NULL`

// queryLanesPrune deletes the lanes of $1 whose keys have no rows left and
// makes the others due again (see lanes_prune in the migrations: it locks
// the lanes before it looks for rows).
const queryLanesPrune = `SELECT %[1]s.lanes_prune($1::text[])`

// queryLanesRepair opens a lane for every key that has rows but no lane,
// and returns those keys. Producers open lanes themselves (the
// messages_open_lanes trigger) and a switch to ordered mode opens them for
// the rows already there (queryLanesBackfill, with producers held out), so
// none is expected: this is a safety net. It walks the distinct keys, not
// the rows, with one index probe per key.
const queryLanesRepair = `
WITH RECURSIVE keys AS (
    (SELECT key FROM %[1]s.messages WHERE key IS NOT NULL ORDER BY key LIMIT 1)
    UNION ALL
    SELECT (SELECT m.key FROM %[1]s.messages AS m WHERE m.key > k.key ORDER BY m.key LIMIT 1)
      FROM keys AS k
     WHERE k.key IS NOT NULL
)
INSERT INTO %[1]s.lanes (key)
SELECT key FROM keys
 WHERE key IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM %[1]s.lanes AS l WHERE l.key = keys.key)
ON CONFLICT (key) DO NOTHING
RETURNING key`

// settleArchive moves the delivered rows and the rows skipped as
// duplicates ($1 ids, $2 claim_seq, $3 duplicate) to the archive and
// records the delivered keys that producers chose (dedup): the first parts
// of queryMessagesSettle, and the whole of queryMessagesArchive.
const settleArchive = `archived AS (
    DELETE FROM %[1]s.messages AS m
     USING unnest($1::bigint[], $2::int[], $3::bool[]) AS s(id, claim_seq, duplicate)
     WHERE m.id = ANY ($1::bigint[]) AND m.id = s.id AND m.claim_seq = s.claim_seq%[3]s
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, s.duplicate, m.dedup
), archive_insert AS (
    INSERT INTO %[1]s.archive (id, topic, payload, key, headers, idempotency_key, destination,
                               created_at, attempts, delivered_at, duplicate)
    SELECT id, topic, payload, key, headers, idempotency_key, destination,
           created_at, attempts, now(), duplicate
      FROM archived
), keys_insert AS (
    INSERT INTO %[1]s.delivered_keys (idempotency_key, delivered_at)
    SELECT idempotency_key, now() FROM archived WHERE dedup AND NOT duplicate
)`

// queryMessagesArchive is settleArchive alone, for the settles that only
// archive (most of them), in unordered mode: PostgreSQL plans each settle
// for its arrays (planPerExecution), and this statement plans in about a
// third of the time of the whole settle (0.3 ms against 0.8 ms). It
// returns the ids archived.
var queryMessagesArchive = `
WITH %[4]s` + settleArchive + `
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}')`

// queryMessagesSettle writes down the outcomes of deliveries in one
// statement (one round trip, one transaction):
//
//   - delivered rows, and rows skipped as duplicates ($1 ids, $2 claim_seq,
//     $3 duplicate), move to the archive, and the keys of those delivered
//     are recorded when the producer chose them (dedup);
//   - rows to try again ($4 ids, $5 claim_seq) end their lease and become
//     due after $6 microseconds, with $7 as the last error (NULL keeps the
//     previous one); $8 = true gives the attempt back (released without a
//     delivery being tried to the end);
//   - failed rows ($9 ids, $10 claim_seq) move to the dead letters with
//     reason $11 and error $12.
//
// It returns the ids each part touched. A row is touched only while its
// claim_seq is still that of the claim that delivered it: every claim
// increments claim_seq and nothing decreases it, so a row another claim has
// taken over (after this one's lease expired) no longer matches and the late
// outcome is dropped, even when a settle is retried after a commit whose
// answer was lost. %[2]s is the ordered-mode part (settleLanes); %[4]s
// and %[3]s, in partitioned mode, the fence that also requires the row's
// bucket to be still this relay's (bucketFence, parameters $13 to $15; $4
// to $6 in queryMessagesArchive).
//
// The relay runs it with a plan made for the actual arrays (see
// planPerExecution): each part finds its rows through the primary key
// (id = ANY), and the planner knows how many there are. A generic plan, or
// a filter on a column such as leased_by whose statistics were taken while
// no row was leased, made PostgreSQL scan the whole table once per settled
// row.
var queryMessagesSettle = `
WITH %[4]s` + settleArchive + `, requeued AS (
    UPDATE %[1]s.messages AS m
       SET leased_by = NULL,
           leased_until = NULL,
           available_at = now() + r.delay_us * interval '1 microsecond',
           last_error = coalesce(r.error, m.last_error),
           attempts = greatest(m.attempts - CASE WHEN r.release THEN 1 ELSE 0 END, 0)
      FROM unnest($4::bigint[], $5::int[], $6::bigint[], $7::text[], $8::bool[])
           AS r(id, claim_seq, delay_us, error, release)
     WHERE m.id = ANY ($4::bigint[]) AND m.id = r.id AND m.claim_seq = r.claim_seq%[3]s
 RETURNING m.id, m.key, m.available_at
), dead AS (
    DELETE FROM %[1]s.messages AS m
     USING unnest($9::bigint[], $10::int[], $11::text[], $12::text[]) AS d(id, claim_seq, reason, error)
     WHERE m.id = ANY ($9::bigint[]) AND m.id = d.id AND m.claim_seq = d.claim_seq%[3]s
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, d.reason, d.error
)%[2]s, dead_insert AS (
    INSERT INTO %[1]s.dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                    created_at, attempts, reason, error)
    SELECT id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason, error
      FROM dead
)
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}'),
       coalesce((SELECT array_agg(id) FROM requeued), '{}'),
       coalesce((SELECT array_agg(id) FROM dead), '{}')`

// settleLanes, in ordered mode, moves the lanes of the settled heads: due
// now when the head left the table (the next row of the key is then its
// head), to the head's new available_at when it was requeued. It is one
// write per key, however many rows wait behind the head.
const settleLanes = `, lanes_moved AS (
    UPDATE %[1]s.lanes AS l
       SET available_at = u.available_at
      FROM (SELECT key, now() AS available_at FROM archived WHERE key IS NOT NULL
            UNION ALL
            SELECT key, available_at FROM requeued WHERE key IS NOT NULL
            UNION ALL
            SELECT key, now() FROM dead WHERE key IS NOT NULL) AS u
     WHERE l.key = u.key
)`

// queryArchiveDeleteExpired deletes up to $2 archived rows delivered before
// $1; the janitor repeats it until fewer come back.
const queryArchiveDeleteExpired = `
DELETE FROM %[1]s.archive
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s.archive WHERE delivered_at < $1 LIMIT $2))`

// queryDeliveredKeysDeleteExpired deletes up to $2 delivered keys recorded
// before $1.
const queryDeliveredKeysDeleteExpired = `
DELETE FROM %[1]s.delivered_keys
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s.delivered_keys WHERE delivered_at < $1 LIMIT $2))`

// The gauges' queries run every StatsInterval, however large the backlog:
// counts stop at gaugeCountCap rows (a gauge reading the cap means "at
// least that many"), and the oldest due row is the first the due index
// yields.

// queryMessagesBacklog counts the due rows per sink ($1 names the default
// sink), up to $2 rows.
const queryMessagesBacklog = `
SELECT coalesce(destination, $1), count(*)
  FROM (SELECT destination FROM %[1]s.messages
         WHERE available_at <= now() AND ` + leaseOver + `
         LIMIT $2) AS due
 GROUP BY 1`

// queryTableHealth reads, in one round trip: the rows waiting for a retry
// after a failure (through messages_retry_idx, never the rows scheduled for
// later) and the dead letters (each up to $2), how long the oldest due row has
// waited, the hot table's dead tuples (vacuum falling behind) and the lock
// requests waiting on it now (claims, producers and vacuum contending). $1
// is the plain schema name.
const queryTableHealth = `
SELECT (SELECT count(*) FROM (SELECT 1 FROM %[1]s.messages
                               WHERE last_error IS NOT NULL AND available_at > now()
                                 AND leased_by IS NULL AND attempts > 0
                               LIMIT $2) AS b),
       coalesce(extract(epoch FROM now() - (
           SELECT min(available_at) FROM %[1]s.messages
            WHERE available_at <= now() AND ` + leaseOver + `)), 0)::float8,
       (SELECT count(*) FROM (SELECT 1 FROM %[1]s.dead_letters LIMIT $2) AS d),
       coalesce((SELECT n_dead_tup FROM pg_catalog.pg_stat_user_tables
                  WHERE schemaname = $1 AND relname = 'messages'), 0),
       (SELECT count(*) FROM pg_catalog.pg_locks
         WHERE NOT granted AND relation = '%[1]s.messages'::regclass)`

// queryAutovacuum reads whether the server runs autovacuum and whether the
// hot table of schema $1 allows it (reloptions autovacuum_enabled).
const queryAutovacuum = `
SELECT current_setting('autovacuum')::bool,
       coalesce((SELECT option_value::bool
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,
                        pg_catalog.pg_options_to_table(c.reloptions)
                  WHERE n.nspname = $1 AND c.relname = 'messages' AND option_name = 'autovacuum_enabled'), true)`

// queryOrderedBacklog counts, in ordered mode, the rows due per sink ($1
// names the default sink): rows without a key that are due, and the heads
// of due lanes that are due; rows waiting behind their key's head are not
// due. Each part stops at $2 rows. It also returns the oldest due time of
// each sink.
const queryOrderedBacklog = `
WITH unkeyed AS (
    SELECT destination, available_at FROM %[1]s.messages
     WHERE key IS NULL AND available_at <= now() AND ` + leaseOver + `
     ORDER BY available_at
     LIMIT $2
), heads AS (
    SELECT h.destination, h.available_at
      FROM (SELECT key FROM %[1]s.lanes WHERE available_at <= now() LIMIT $2) AS l,
           LATERAL (SELECT m.destination, m.available_at, m.leased_until FROM %[1]s.messages AS m
                     WHERE m.key = l.key ORDER BY m.id LIMIT 1) AS h
     WHERE h.available_at <= now() AND (h.leased_until IS NULL OR h.leased_until <= now())
)
SELECT coalesce(destination, $1), count(*), min(available_at)
  FROM (SELECT * FROM unkeyed UNION ALL SELECT * FROM heads) AS due
 GROUP BY 1`

// queryOrderedKeys returns, in ordered mode, the keys whose head failed and
// waits for its retry (looking at up to $1 lanes not due now) and the rows
// that wait behind their key's head (keyed rows less lanes, each count
// stopping at $2).
const queryOrderedKeys = `
SELECT (SELECT count(*)
          FROM (SELECT key FROM %[1]s.lanes WHERE available_at > now() LIMIT $1) AS l,
               LATERAL (SELECT m.attempts, m.leased_by, m.available_at FROM %[1]s.messages AS m
                         WHERE m.key = l.key ORDER BY m.id LIMIT 1) AS h
         WHERE h.attempts > 0 AND h.leased_by IS NULL AND h.available_at > now()),
       greatest((SELECT count(*) FROM (SELECT 1 FROM %[1]s.messages WHERE key IS NOT NULL LIMIT $2) AS k)
              - (SELECT count(*) FROM (SELECT 1 FROM %[1]s.lanes LIMIT $2) AS l), 0)`

// queries holds the statements rendered for one schema.
type queries struct {
	// claim is the claim of queryMessagesClaim: every due row, or in
	// ordered mode only the rows without a key.
	claim, settle                        string
	claimLanes, pruneLanes, repairLanes  string
	backfillLanes, clearLanes            string
	modeRead, modeSwitch, modeSwitchLock string
	applyMode                            string
	// archiveOnly is queryMessagesArchive, empty in ordered mode (where a
	// settle also moves lanes).
	archiveOnly string
	// Partitioned mode (sql_buckets.go).
	// claimBuckets[held] is bucketClaim(held).
	claimBuckets                            [2]string
	bucketsRenew, bucketsLive               string
	bucketsAcquire, bucketsRelease          string
	bucketsReset                            string
	relaysHeartbeat, relaysRestart          string
	relaysLeave, relaysForget               string
	deleteExpiredArchive, deleteExpiredKeys string
	backlog, tableHealth                    string
	autovacuum                              string
	orderedBacklog, orderedKeys             string
}

func renderQueries(schema string, mode outbox.Mode) queries {
	s := outbox.QuoteSchema(schema)
	f := func(q string) string { return fmt.Sprintf(q, s) }
	condition, lanes := "", ""
	var archiveCTE, settleCTE, fence string
	switch mode {
	case outbox.ModeOrdered:
		condition, lanes = unkeyedClaimCondition, f(settleLanes)
	case outbox.ModePartitioned:
		archiveCTE, fence = bucketFence(4)
		settleCTE, _ = bucketFence(13)
		archiveCTE, settleCTE, fence = f(archiveCTE), f(settleCTE), f(fence)
	}
	archiveOnly := ""
	if mode != outbox.ModeOrdered {
		archiveOnly = fmt.Sprintf(queryMessagesArchive, s, "", fence, archiveCTE)
	}
	return queries{
		claim:                fmt.Sprintf(queryMessagesClaim, s, condition),
		settle:               fmt.Sprintf(queryMessagesSettle, s, lanes, fence, settleCTE),
		archiveOnly:          archiveOnly,
		claimBuckets:         [2]string{bucketClaim(s, false), bucketClaim(s, true)},
		bucketsRenew:         f(queryBucketsRenew),
		bucketsLive:          f(queryBucketsLive),
		bucketsAcquire:       f(queryBucketsAcquire),
		bucketsRelease:       f(queryBucketsRelease),
		bucketsReset:         f(queryBucketsReset),
		claimLanes:           f(queryLanesClaim),
		pruneLanes:           f(queryLanesPrune),
		repairLanes:          f(queryLanesRepair),
		backfillLanes:        f(queryLanesBackfill),
		clearLanes:           f(queryLanesClear),
		modeRead:             f(queryModeRead),
		modeSwitch:           f(queryModeSwitch),
		modeSwitchLock:       f(queryModeSwitchLock),
		applyMode:            f(queryModeApply),
		relaysHeartbeat:      f(queryRelaysHeartbeat),
		relaysRestart:        f(queryRelaysRestart),
		relaysLeave:          f(queryRelaysLeave),
		relaysForget:         f(queryRelaysForget),
		deleteExpiredArchive: f(queryArchiveDeleteExpired),
		deleteExpiredKeys:    f(queryDeliveredKeysDeleteExpired),
		backlog:              f(queryMessagesBacklog),
		tableHealth:          f(queryTableHealth),
		autovacuum:           queryAutovacuum,
		orderedBacklog:       f(queryOrderedBacklog),
		orderedKeys:          f(queryOrderedKeys),
	}
}

// The registry of relays and the schema's mode (mode.go). The mode is
// decided under a transaction-level advisory lock ($1 of queryModeLock names
// the schema), so relays starting together decide one after the other.

// A relay frozen while it registers (SIGSTOP, a VM pause) would hold the
// lock, and during a switch the table lock that holds producers back, until
// its connection died: the server ends the session after 5 seconds idle in
// the transaction.
const queryModeLock = `SELECT set_config('idle_in_transaction_session_timeout', '5000', true), pg_advisory_xact_lock(hashtext($1))`

// queryModeRead returns the schema's recorded mode and the relays seen
// within $2 other than $1, with their modes.
const queryModeRead = `
SELECT (SELECT mode FROM %[1]s.relay_mode),
       coalesce((SELECT array_agg(id || ' (' || mode || ')' ORDER BY id) FROM %[1]s.relays
                  WHERE id <> $1 AND last_seen > now() - $2::interval AND mode <> $3), '{}')`

// queryModeSwitch records $1 as the schema's mode, switched by relay $2.
const queryModeSwitch = `UPDATE %[1]s.relay_mode SET mode = $1, changed_at = now(), changed_by = $2`

// queryModeApply enables the insert trigger that opens lanes in ordered
// mode and disables it otherwise, as the mode recorded in the transaction
// says (messages_apply_mode in the migrations).
const queryModeApply = `SELECT %[1]s.messages_apply_mode()`

// queryModeSwitchLock keeps producers out of the messages table while the
// mode switches: it waits for every transaction that is inserting to commit
// and holds new inserts until the switch commits, so that each row is either
// seen by the switch's backfill of lanes or written after the switch, when
// the producer's trigger opens its lane. It gives up after lock_timeout.
const queryModeSwitchLock = `SET LOCAL lock_timeout = '10s'; LOCK TABLE %[1]s.messages IN SHARE MODE`

// queryLanesBackfill opens a lane for every key with rows, when the schema
// switches to ordered mode.
const queryLanesBackfill = `
INSERT INTO %[1]s.lanes (key)
SELECT DISTINCT key FROM %[1]s.messages WHERE key IS NOT NULL
ON CONFLICT (key) DO NOTHING`

// queryLanesClear drops every lane, when the schema leaves ordered mode.
const queryLanesClear = `DELETE FROM %[1]s.lanes`

// queryRelaysHeartbeat registers relay $1 (version $2, mode $3, wanting
// NOTIFY wake-ups: $4) or records that it is alive, and returns the schema's
// mode.
const queryRelaysHeartbeat = `
WITH seen AS (
    INSERT INTO %[1]s.relays (id, version, mode, notify) VALUES ($1, $2, $3, $4)
    ON CONFLICT (id) DO UPDATE SET version = excluded.version, mode = excluded.mode, notify = excluded.notify, last_seen = now()
)
SELECT mode FROM %[1]s.relay_mode`

// queryRelaysRestart marks relay $1 as started now (its row may be left
// from an earlier process with the same id).
const queryRelaysRestart = `UPDATE %[1]s.relays SET started_at = now() WHERE id = $1`

// queryRelaysLeave removes relay $1 from the registry at a clean shutdown.
const queryRelaysLeave = `DELETE FROM %[1]s.relays WHERE id = $1`

// queryRelaysForget removes relays not seen for $1.
const queryRelaysForget = `DELETE FROM %[1]s.relays WHERE last_seen < now() - $1::interval`
