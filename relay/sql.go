package relay

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// Every statement the relay runs. %[1]s is the quoted schema (and %[2]s,
// in the claim, the ordered-mode condition); queries are rendered once per
// Relay by renderQueries.

// queryMessagesClaim leases up to $4 due rows, oldest first, skipping rows
// other relays hold locked or leased and rows whose sink is in $3
// (unavailable or at capacity). It writes no indexed column, so the update
// is HOT. The update finds the rows by primary key from the locked set (an
// array, so that the planner cannot choose to scan and hash the whole table
// instead). It returns, per row, whether the row was rescued from an expired
// lease and whether its idempotency key was already delivered (a LIMIT 1
// subquery, so that the planner probes the index per row instead of hashing
// the whole key table).
const queryMessagesClaim = `
WITH due AS MATERIALIZED (
    SELECT id, leased_by
      FROM %[1]s.messages AS c
     WHERE available_at <= now()
       AND (leased_until IS NULL OR leased_until <= now())
       AND coalesce(destination, $2) <> ALL ($3::text[])%[2]s
     ORDER BY available_at, id
     LIMIT $4
       FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s.messages AS m
   SET attempts = m.attempts + 1,
       claim_seq = m.claim_seq + 1,
       leased_by = $1,
       leased_until = now() + $5::interval
 WHERE m.id = ANY (ARRAY(SELECT id FROM due))
RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
          m.created_at, m.attempts, m.claim_seq,
          m.id = ANY (ARRAY(SELECT id FROM due WHERE leased_by IS NOT NULL)),
          (SELECT true FROM %[1]s.delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL`

// orderedClaimCondition restricts a claim to the head of each key: a keyed
// row is claimable only when no older row with its key is left in the hot
// table (pending, leased or in backoff), so at most one message per key is
// in flight and each key is delivered in insert order (RELAY_ORDERED).
const orderedClaimCondition = `
       AND (c.key IS NULL OR NOT EXISTS (
            SELECT 1 FROM %[1]s.messages AS older WHERE older.key = c.key AND older.id < c.id))`

// queryMessagesSettle writes down the outcomes of deliveries in one
// statement (one round trip, one transaction):
//
//   - delivered rows, and rows skipped as duplicates ($1 ids, $2 claim_seq,
//     $3 duplicate), move to the archive, and the keys of those delivered
//     are recorded;
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
// answer was lost. %[2]s is the ordered-mode part (orderedHoldBack).
//
// The relay runs it with a plan made for the actual arrays (see
// planPerExecution): each part finds its rows through the primary key
// (id = ANY), and the planner knows how many there are. A generic plan, or
// a filter on a column such as leased_by whose statistics were taken while
// no row was leased, made PostgreSQL scan the whole table once per settled
// row.
const queryMessagesSettle = `
WITH archived AS (
    DELETE FROM %[1]s.messages AS m
     USING unnest($1::bigint[], $2::int[], $3::bool[]) AS s(id, claim_seq, duplicate)
     WHERE m.id = ANY ($1::bigint[]) AND m.id = s.id AND m.claim_seq = s.claim_seq
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, s.duplicate
), archive_insert AS (
    INSERT INTO %[1]s.archive (id, topic, payload, key, headers, idempotency_key, destination,
                               created_at, attempts, delivered_at, duplicate)
    SELECT id, topic, payload, key, headers, idempotency_key, destination,
           created_at, attempts, now(), duplicate
      FROM archived
), keys_insert AS (
    INSERT INTO %[1]s.delivered_keys (idempotency_key, delivered_at)
    SELECT idempotency_key, now() FROM archived WHERE NOT duplicate
), requeued AS (
    UPDATE %[1]s.messages AS m
       SET leased_by = NULL,
           leased_until = NULL,
           available_at = now() + r.delay_us * interval '1 microsecond',
           last_error = coalesce(r.error, m.last_error),
           attempts = m.attempts - CASE WHEN r.release THEN 1 ELSE 0 END
      FROM unnest($4::bigint[], $5::int[], $6::bigint[], $7::text[], $8::bool[])
           AS r(id, claim_seq, delay_us, error, release)
     WHERE m.id = ANY ($4::bigint[]) AND m.id = r.id AND m.claim_seq = r.claim_seq
 RETURNING m.id, m.key, m.available_at
)%[2]s, dead AS (
    DELETE FROM %[1]s.messages AS m
     USING unnest($9::bigint[], $10::int[], $11::text[], $12::text[]) AS d(id, claim_seq, reason, error)
     WHERE m.id = ANY ($9::bigint[]) AND m.id = d.id AND m.claim_seq = d.claim_seq
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, d.reason, d.error
), dead_insert AS (
    INSERT INTO %[1]s.dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                    created_at, attempts, reason, error)
    SELECT id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason, error
      FROM dead
)
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}'),
       coalesce((SELECT array_agg(id) FROM requeued), '{}'),
       coalesce((SELECT array_agg(id) FROM dead), '{}')`

// orderedHoldBack, in ordered mode, moves the rows queued behind a requeued
// head of their key to the head's new available_at: they could not be
// claimed before it anyway, and out of the due range a claim does not walk
// past them one by one.
const orderedHoldBack = `, held_back AS (
    UPDATE %[1]s.messages AS m
       SET available_at = q.available_at
      FROM (SELECT key, id, available_at FROM requeued WHERE key IS NOT NULL) AS q
     WHERE m.key = q.key AND m.id > q.id AND m.available_at < q.available_at
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
         WHERE available_at <= now() AND (leased_until IS NULL OR leased_until <= now())
         LIMIT $2) AS due
 GROUP BY 1`

// queryTableHealth reads, in one round trip: the rows waiting for a retry
// and the dead letters (each up to $2), how long the oldest due row has
// waited, the hot table's dead tuples (vacuum falling behind) and the lock
// requests waiting on it now (claims, producers and vacuum contending). $1
// is the plain schema name.
const queryTableHealth = `
SELECT (SELECT count(*) FROM (SELECT 1 FROM %[1]s.messages
                               WHERE available_at > now() AND leased_by IS NULL AND attempts > 0
                               LIMIT $2) AS b),
       coalesce(extract(epoch FROM now() - (
           SELECT min(available_at) FROM %[1]s.messages
            WHERE available_at <= now() AND (leased_until IS NULL OR leased_until <= now()))), 0)::float8,
       (SELECT count(*) FROM (SELECT 1 FROM %[1]s.dead_letters LIMIT $2) AS d),
       coalesce((SELECT n_dead_tup FROM pg_catalog.pg_stat_user_tables
                  WHERE schemaname = $1 AND relname = 'messages'), 0),
       (SELECT count(*) FROM pg_catalog.pg_locks
         WHERE NOT granted AND relation = '%[1]s.messages'::regclass)`

// queries holds the statements rendered for one schema.
type queries struct {
	claim, settle                           string
	deleteExpiredArchive, deleteExpiredKeys string
	backlog, tableHealth                    string
}

func renderQueries(schema string, ordered bool) queries {
	s := migrations.Quote(schema)
	f := func(q string) string { return fmt.Sprintf(q, s) }
	condition, holdBack := "", ""
	if ordered {
		condition, holdBack = f(orderedClaimCondition), f(orderedHoldBack)
	}
	return queries{
		claim:                fmt.Sprintf(queryMessagesClaim, s, condition),
		settle:               fmt.Sprintf(queryMessagesSettle, s, holdBack),
		deleteExpiredArchive: f(queryArchiveDeleteExpired),
		deleteExpiredKeys:    f(queryDeliveredKeysDeleteExpired),
		backlog:              f(queryMessagesBacklog),
		tableHealth:          f(queryTableHealth),
	}
}
