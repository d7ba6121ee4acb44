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
// is HOT. It returns, per row, whether the row was rescued from an expired
// lease and whether its idempotency key was already delivered (a LIMIT 1
// subquery, so that the planner probes the index per row instead of hashing
// the whole key table).
const queryMessagesClaim = `
WITH due AS (
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
       leased_by = $1,
       leased_until = now() + $5::interval
  FROM due
 WHERE m.id = due.id
RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
          m.created_at, m.attempts, due.leased_by IS NOT NULL,
          (SELECT true FROM %[1]s.delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL`

// orderedClaimCondition restricts a claim to the head of each key: a keyed
// row is claimable only when no older row with its key is left in the hot
// table (pending, leased or in backoff), so at most one message per key is
// in flight and each key is delivered in insert order (RELAY_ORDERED).
const orderedClaimCondition = `
       AND (c.key IS NULL OR NOT EXISTS (
            SELECT 1 FROM %[1]s.messages AS older WHERE older.key = c.key AND older.id < c.id))`

// queryMessagesArchive moves delivered rows (and rows skipped as duplicates)
// still leased by this claim ($4 = relay id, attempts = the claim's) to the
// archive and records their idempotency keys, in one statement. It returns
// the number of rows moved.
const queryMessagesArchive = `
WITH settled AS (
    DELETE FROM %[1]s.messages AS m
     USING unnest($1::bigint[], $2::int[], $3::bool[]) AS s(id, attempts, duplicate)
     WHERE m.id = s.id AND m.attempts = s.attempts AND m.leased_by = $4
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, s.duplicate
), archived AS (
    INSERT INTO %[1]s.archive (id, topic, payload, key, headers, idempotency_key, destination,
                               created_at, attempts, delivered_at, duplicate)
    SELECT id, topic, payload, key, headers, idempotency_key, destination,
           created_at, attempts, now(), duplicate
      FROM settled
), recorded AS (
    INSERT INTO %[1]s.delivered_keys (idempotency_key, delivered_at)
    SELECT idempotency_key, now() FROM settled WHERE NOT duplicate
)
SELECT count(*) FROM settled`

// queryMessagesRequeue ends leases on rows that will be tried again: after
// $3 microseconds, with $4 as the last error (NULL keeps the previous one).
// $5 = true gives the attempt back: the row was released at shutdown without
// a delivery being tried to the end.
const queryMessagesRequeue = `
UPDATE %[1]s.messages AS m
   SET leased_by = NULL,
       leased_until = NULL,
       available_at = now() + r.delay_us * interval '1 microsecond',
       last_error = coalesce(r.error, m.last_error),
       attempts = m.attempts - CASE WHEN r.release THEN 1 ELSE 0 END
  FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::text[], $5::bool[])
       AS r(id, attempts, delay_us, error, release)
 WHERE m.id = r.id AND m.attempts = r.attempts AND m.leased_by = $6`

// queryMessagesDeadLetter moves rows still leased by this claim to the dead
// letters with a reason and the last error.
const queryMessagesDeadLetter = `
WITH dead AS (
    DELETE FROM %[1]s.messages AS m
     USING unnest($1::bigint[], $2::int[], $3::text[], $4::text[]) AS d(id, attempts, reason, error)
     WHERE m.id = d.id AND m.attempts = d.attempts AND m.leased_by = $5
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, d.reason, d.error
)
INSERT INTO %[1]s.dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                created_at, attempts, reason, error)
SELECT id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason, error
  FROM dead`

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

// queryMessagesStats summarises the hot table per sink for the backlog
// gauges: rows due now, rows waiting for a retry and the oldest due time.
const queryMessagesStats = `
SELECT coalesce(destination, $1),
       count(*) FILTER (WHERE due),
       count(*) FILTER (WHERE available_at > now() AND leased_by IS NULL AND attempts > 0),
       coalesce(extract(epoch FROM now() - min(available_at) FILTER (WHERE due)), 0)::float8
  FROM (SELECT destination, available_at, leased_by, attempts,
               available_at <= now() AND (leased_until IS NULL OR leased_until <= now()) AS due
          FROM %[1]s.messages) AS m
 GROUP BY 1`

// queryTableHealth counts the dead letters, the hot table's dead tuples (a
// sign that vacuum falls behind) and the lock requests waiting on it now
// (contention between claims, producers and vacuum). $1 is the plain schema
// name.
const queryTableHealth = `
SELECT (SELECT count(*) FROM %[1]s.dead_letters),
       coalesce((SELECT n_dead_tup FROM pg_catalog.pg_stat_user_tables
                  WHERE schemaname = $1 AND relname = 'messages'), 0),
       (SELECT count(*) FROM pg_catalog.pg_locks
         WHERE NOT granted AND relation = '%[1]s.messages'::regclass)`

// queries holds the statements rendered for one schema.
type queries struct {
	claim, archive, requeue, deadLetter     string
	deleteExpiredArchive, deleteExpiredKeys string
	stats, tableHealth                      string
}

func renderQueries(schema string, ordered bool) queries {
	s := migrations.Quote(schema)
	f := func(q string) string { return fmt.Sprintf(q, s) }
	condition := ""
	if ordered {
		condition = f(orderedClaimCondition)
	}
	return queries{
		claim:                fmt.Sprintf(queryMessagesClaim, s, condition),
		archive:              f(queryMessagesArchive),
		requeue:              f(queryMessagesRequeue),
		deadLetter:           f(queryMessagesDeadLetter),
		deleteExpiredArchive: f(queryArchiveDeleteExpired),
		deleteExpiredKeys:    f(queryDeliveredKeysDeleteExpired),
		stats:                f(queryMessagesStats),
		tableHealth:          f(queryTableHealth),
	}
}
