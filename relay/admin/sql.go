package admin

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Every statement the operations run. %[1]s is the quoted schema; render
// fills it in. Optional filters arrive as NULL parameters and drop out
// ("$n IS NULL OR …"), so that each statement is one constant; the values
// are known when the statement is planned, so the planner still uses the
// indexes they allow.
//
// Comparisons between idempotency keys mix the "C" collation of the hot
// table and delivered_keys with the default collation of the other tables;
// PostgreSQL resolves them to "C", the collation of the indexes.

// Status.

// queryMessagesStatus summarises the hot table per destination ($1 stands
// for null) in one scan, with the relay's definitions: in flight while a
// lease runs, due when available and not leased, in backoff when a failed
// row waits for its retry, delayed when a row that was never tried waits
// for its available_at. When $2 (ordered mode), a keyed row behind an older
// row of its key is waiting, not due.
const queryMessagesStatus = `
SELECT coalesce(destination, $1),
       count(*),
       count(*) FILTER (WHERE due AND NOT waiting),
       min(available_at) FILTER (WHERE due AND NOT waiting),
       count(*) FILTER (WHERE in_flight),
       count(*) FILTER (WHERE backoff),
       min(available_at) FILTER (WHERE backoff),
       count(*) FILTER (WHERE delayed AND NOT waiting),
       min(available_at) FILTER (WHERE delayed AND NOT waiting),
       count(*) FILTER (WHERE waiting)
  FROM (SELECT destination, available_at,
               available_at <= now() AND (leased_until IS NULL OR leased_until <= now()) AS due,
               leased_until > now() AS in_flight,
               available_at > now() AND leased_by IS NULL AND attempts > 0 AS backoff,
               available_at > now() AND attempts = 0 AS delayed,
               $2 AND key IS NOT NULL AND id <> min(id) OVER (PARTITION BY key) AND attempts = 0 AS waiting
          FROM %[1]s.messages) AS m
 GROUP BY 1
 ORDER BY 1`

// queryBackoffByError groups the rows waiting for a retry by their last
// error, the $1 most frequent first, with the earliest retry of each.
const queryBackoffByError = `
SELECT coalesce(last_error, ''), count(*), min(available_at)
  FROM %[1]s.messages
 WHERE available_at > now() AND leased_by IS NULL AND attempts > 0
 GROUP BY 1
 ORDER BY 2 DESC, 3
 LIMIT $1`

// queryDeliveredPerMinute counts the rows archived in each of the last $1
// minutes (this one included), delivered and deduplicated apart.
const queryDeliveredPerMinute = `
SELECT m.minute,
       count(a.delivered_at) FILTER (WHERE NOT a.duplicate),
       count(a.delivered_at) FILTER (WHERE a.duplicate)
  FROM generate_series(date_trunc('minute', now()) - ($1 - 1) * interval '1 minute', date_trunc('minute', now()), interval '1 minute') AS m(minute)
  LEFT JOIN %[1]s.archive AS a
    ON a.delivered_at >= m.minute AND a.delivered_at < m.minute + interval '1 minute'
 GROUP BY 1
 ORDER BY 1`

// queryRelayMode returns the schema's mode and when it last changed.
const queryRelayMode = `SELECT mode, changed_at, coalesce(changed_by, '') FROM %[1]s.relay_mode`

// queryRelaysStatus lists the relays registered on the schema; a relay
// seen within $1 is alive.
const queryRelaysStatus = `
SELECT id, version, mode, started_at, last_seen, last_seen > now() - $1::interval
  FROM %[1]s.relays
 ORDER BY last_seen > now() - $1::interval DESC, id`

// queryBlockedKeys returns, in ordered mode, the $1 keys whose head (their
// oldest row) has failed, oldest head first: the head's age, attempts, next
// retry and last error, and the rows of the key. Heads are found among the
// candidates (rows that do not wait behind an older row of their key,
// through messages_heads_due_idx), then checked to be their key's oldest
// row, looked up as the relay's lookups of a key's oldest row are (relay's
// ofKey): the key bounded in row comparisons, so that PostgreSQL cannot take
// the primary key in id order for it.
const queryBlockedKeys = `
SELECT h.key, h.created_at, h.attempts, h.available_at, coalesce(h.leased_until > now(), false), coalesce(h.last_error, ''),
       (SELECT count(*) FROM %[1]s.messages AS k WHERE k.key = h.key)
  FROM %[1]s.messages AS h
 WHERE h.key IS NOT NULL AND NOT h.waiting
   AND h.attempts > 0 AND h.last_error IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM %[1]s.messages AS o
                    WHERE o.key IS NOT NULL AND (o.key, o.id) >= (h.key, -9223372036854775808) AND (o.key, o.id) < (h.key, h.id))
 ORDER BY h.created_at
 LIMIT $1`

// queryMessagesLeases counts the rows in flight per relay.
const queryMessagesLeases = `
SELECT coalesce(leased_by, ''), count(*), min(leased_until), max(leased_until)
  FROM %[1]s.messages
 WHERE leased_until > now()
 GROUP BY 1
 ORDER BY 2 DESC, 1`

// queryBucketOwners, in partitioned mode, groups the buckets by the relay
// that holds them (an empty owner for buckets nobody holds: released, or
// their lease ran out), with that relay's last heartbeat, the earliest end
// of its bucket leases, the newest epoch, and the due rows and the rows in
// flight in its buckets.
const queryBucketOwners = `
WITH owners AS (
    SELECT bucket, epoch, lease_until,
           CASE WHEN owner IS NOT NULL AND lease_until > now() THEN owner ELSE '' END AS owner
      FROM %[1]s.buckets
), rows AS (
    SELECT %[1]s.messages_bucket(key, id) AS bucket,
           count(*) FILTER (WHERE available_at <= now() AND (leased_until IS NULL OR leased_until <= now())) AS due,
           count(*) FILTER (WHERE leased_until > now()) AS in_flight
      FROM %[1]s.messages
     GROUP BY 1
)
SELECT o.owner, array_agg(o.bucket ORDER BY o.bucket), max(o.epoch),
       min(o.lease_until) FILTER (WHERE o.owner <> ''),
       (SELECT r.last_seen FROM %[1]s.relays AS r WHERE r.id = o.owner),
       coalesce(sum(r.due), 0)::bigint, coalesce(sum(r.in_flight), 0)::bigint
  FROM owners AS o LEFT JOIN rows AS r ON r.bucket = o.bucket
 GROUP BY o.owner
 ORDER BY o.owner = '', o.owner`

// queryDeadLettersByReason counts the dead letters per reason.
const queryDeadLettersByReason = `
SELECT reason, count(*), max(failed_at)
  FROM %[1]s.dead_letters
 GROUP BY reason
 ORDER BY 2 DESC, 1`

// queryDeadLettersTopErrors returns the $1 most frequent error texts.
const queryDeadLettersTopErrors = `
SELECT error, count(*), max(failed_at)
  FROM %[1]s.dead_letters
 GROUP BY error
 ORDER BY 2 DESC, 3 DESC
 LIMIT $1`

// queryTablesStatus reads the size and vacuum statistics of the relay's
// tables in schema $1 (the plain name). n_live_tup is the statistics
// system's running estimate of the row count.
const queryTablesStatus = `
SELECT relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup, last_vacuum, last_autovacuum
  FROM pg_catalog.pg_stat_user_tables
 WHERE schemaname = $1 AND relname IN ('messages', 'archive', 'delivered_keys', 'dead_letters')
 ORDER BY array_position(ARRAY['messages', 'archive', 'delivered_keys', 'dead_letters']::name[], relname)`

// queryHorizonHolders lists the $1 oldest holders of the database's xmin
// horizon, oldest xmin first: the sessions of the database holding a
// snapshot or a transaction id (and walsenders: a standby's
// hot_standby_feedback), prepared transactions and replication slots with
// an xmin, each with its kind (session, prepared, replication), pid, name
// (a prepared transaction's gid, a slot's name), user, application, state,
// age in seconds since its transaction started (NULL where PostgreSQL does
// not say: slots, walsenders, and other roles' sessions without
// pg_read_all_stats) and in transactions. It leaves out the reading backend
// and autovacuum workers (relay/sql.go's horizonHolding, with names).
const queryHorizonHolders = `
SELECT holder, pid, name, usename, application_name, state, age_seconds, age_xids
  FROM (
    SELECT CASE WHEN a.datid IS NULL OR a.backend_type = 'walsender' THEN 'replication' ELSE 'session' END AS holder,
           a.pid, NULL::text AS name, a.usename::text AS usename, a.application_name, a.state,
           extract(epoch FROM now() - a.xact_start)::float8 AS age_seconds,
           greatest(age(a.backend_xmin), age(a.backend_xid))::bigint AS age_xids
      FROM pg_catalog.pg_stat_activity AS a
     WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND (a.datid IS NULL OR a.datid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()))
       AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
     UNION ALL
    SELECT 'prepared', NULL, p.gid, p.owner::text, NULL, NULL,
           extract(epoch FROM now() - p.prepared)::float8, age(p.transaction)::bigint
      FROM pg_catalog.pg_prepared_xacts AS p
     WHERE p.database = current_database()
     UNION ALL
    SELECT 'replication', s.active_pid, s.slot_name::text, NULL, NULL, NULL, NULL, age(s.xmin)::bigint
      FROM pg_catalog.pg_replication_slots AS s
     WHERE s.xmin IS NOT NULL) AS h
 ORDER BY age_xids DESC, age_seconds DESC NULLS LAST
 LIMIT $1`

// queryReadAllStats reads whether the reader sees when every session's
// transaction started (it has the privileges of pg_read_all_stats).
const queryReadAllStats = `SELECT pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')`

// queryArchiveCountExact counts the archive and the delivered keys exactly:
// two full scans, for StatusOptions.ExactCounts.
const queryArchiveCountExact = `
SELECT (SELECT count(*) FROM %[1]s.archive), (SELECT count(*) FROM %[1]s.delivered_keys)`

// Dead letters.

// deadLettersMatch selects dead letters by the DeadFilter parameters: $1 ids,
// $2 exact topic, $3 topic LIKE pattern, $4 key, $5 reason, $6 error ILIKE
// pattern, $7 failed at or after, $8 limit (NULL: all), $9 destination
// (DefaultSinkLabel for none), oldest failure first.
const deadLettersMatch = `
  FROM %[1]s.dead_letters AS d
 WHERE ($1::bigint[] IS NULL OR d.id = ANY ($1))
   AND ($2::text IS NULL OR d.topic = $2)
   AND ($3::text IS NULL OR d.topic LIKE $3)
   AND ($4::text IS NULL OR d.key = $4)
   AND ($5::text IS NULL OR d.reason = $5)
   AND ($6::text IS NULL OR d.error ILIKE $6)
   AND ($7::timestamptz IS NULL OR d.failed_at >= $7)
   AND ($9::text IS NULL OR d.destination = $9 OR ($9 = '` + DefaultSinkLabel + `' AND d.destination IS NULL))
 ORDER BY d.failed_at, d.id
 LIMIT $8`

// queryDeadLettersList returns the matching dead letters, without their
// payloads, and how many match in all.
const queryDeadLettersList = `
SELECT d.id, d.topic, coalesce(d.key, ''), d.idempotency_key, coalesce(d.destination, ''),
       d.attempts, d.reason, d.error, d.failed_at, d.created_at, octet_length(d.payload),
       count(*) OVER ()` + deadLettersMatch

// deadLettersJudge sorts the picked dead letters into those that go back
// to the hot table ('retry') and those that stay: 'delivered' when their
// idempotency key was delivered (the relay would archive the retry as a
// duplicate without sending it), 'pending' when a row with their key is in
// the hot table, or when another picked dead letter with the same key, a
// newer one, goes back instead.
const deadLettersJudge = `
), judged AS (
    SELECT p.id, p.idempotency_key,
           CASE
               WHEN EXISTS (SELECT 1 FROM %[1]s.delivered_keys AS k WHERE k.idempotency_key = p.idempotency_key) THEN 'delivered'
               WHEN EXISTS (SELECT 1 FROM %[1]s.messages AS m WHERE m.idempotency_key = p.idempotency_key) THEN 'pending'
               WHEN row_number() OVER (PARTITION BY p.idempotency_key ORDER BY p.id DESC) > 1 THEN 'pending'
               ELSE 'retry'
           END AS verdict
      FROM picked AS p
)`

// queryDeadLettersRetry moves the matching dead letters that can go back to
// the hot table as new rows: a new id, attempts 0, due now (a cancelled row
// whose available_at is still ahead keeps it), no lease and no last error,
// with their payload, headers and keys (created now: the insert guard sets
// created_at), and their topic
// and destination unless $10 (topic) or $11 (destination; DefaultSinkLabel
// for none) re-route them. ON CONFLICT covers a row with the same key inserted since the
// judgement; only dead letters whose row was inserted are deleted. It
// returns the number matched, the number moved, and the ids of those left
// because their key was delivered.
const queryDeadLettersRetry = `
WITH picked AS (
    SELECT d.id, d.idempotency_key` + deadLettersMatch + `
       FOR UPDATE SKIP LOCKED` + deadLettersJudge + `, moved AS (
    INSERT INTO %[1]s.messages (topic, payload, key, headers, idempotency_key, destination, available_at)
    SELECT coalesce($10::text, d.topic), d.payload, d.key, d.headers, d.idempotency_key,
           CASE WHEN $11::text IS NULL THEN d.destination WHEN $11 = '` + DefaultSinkLabel + `' THEN NULL ELSE $11 END,
           CASE WHEN d.reason = 'cancelled' AND d.available_at > now() THEN d.available_at ELSE now() END
      FROM judged AS j
      JOIN %[1]s.dead_letters AS d ON d.id = j.id
     WHERE j.verdict = 'retry'
     ORDER BY d.id
        ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING idempotency_key
), deleted AS (
    DELETE FROM %[1]s.dead_letters AS d
     USING judged AS j, moved
     WHERE d.id = j.id AND j.verdict = 'retry' AND moved.idempotency_key = j.idempotency_key
    RETURNING d.id
)
SELECT count(*),
       (SELECT count(*) FROM deleted),
       coalesce(array_agg(id ORDER BY id) FILTER (WHERE verdict = 'delivered'), '{}')
  FROM judged`

// queryDeadLettersRetryJudged locks the matching dead letters and returns
// queryDeadLettersRetry's verdict on each ('retry', 'pending' or
// 'delivered'), by id: the order in which it inserts them. A retry whose
// statement the hot table refuses moves them one at a time from this.
const queryDeadLettersRetryJudged = `
WITH picked AS (
    SELECT d.id, d.idempotency_key` + deadLettersMatch + `
       FOR UPDATE SKIP LOCKED` + deadLettersJudge + `
SELECT id, verdict FROM judged ORDER BY id`

// queryDeadLettersRetryDry is queryDeadLettersRetry's judgement without the
// move, for dry runs: matched, would move, delivered ids.
const queryDeadLettersRetryDry = `
WITH picked AS (
    SELECT d.id, d.idempotency_key` + deadLettersMatch + deadLettersJudge + `
SELECT count(*),
       count(*) FILTER (WHERE verdict = 'retry'),
       coalesce(array_agg(id ORDER BY id) FILTER (WHERE verdict = 'delivered'), '{}')
  FROM judged`

// queryDeadLettersPurge deletes the matching dead letters.
const queryDeadLettersPurge = `
WITH picked AS (
    SELECT d.id` + deadLettersMatch + `
       FOR UPDATE SKIP LOCKED
)
DELETE FROM %[1]s.dead_letters AS d
 USING picked
 WHERE d.id = picked.id`

// queryDeadLettersPurgeDry counts what queryDeadLettersPurge would delete.
const queryDeadLettersPurgeDry = `
SELECT count(*) FROM (SELECT d.id` + deadLettersMatch + `) AS picked`

// Replay.

// archiveReplayJudge selects delivered (not duplicate) archived rows by $1,
// $2 delivered_at range, $3, $4 created_at range (from inclusive, to
// exclusive), $5 exact topic, $6 topic LIKE pattern, $7 key; keeps the most
// recent delivery of each idempotency key; and marks those whose key is
// pending in the hot table.
const archiveReplayJudge = `
WITH matched AS (
    SELECT a.id, a.topic, a.payload, a.key, a.headers, a.idempotency_key, a.destination, a.delivered_at
      FROM %[1]s.archive AS a
     WHERE NOT a.duplicate
       AND ($1::timestamptz IS NULL OR a.delivered_at >= $1)
       AND ($2::timestamptz IS NULL OR a.delivered_at < $2)
       AND ($3::timestamptz IS NULL OR a.created_at >= $3)
       AND ($4::timestamptz IS NULL OR a.created_at < $4)
       AND ($5::text IS NULL OR a.topic = $5)
       AND ($6::text IS NULL OR a.topic LIKE $6)
       AND ($7::text IS NULL OR a.key = $7)
), latest AS (
    SELECT DISTINCT ON (idempotency_key) *
      FROM matched
     ORDER BY idempotency_key, delivered_at DESC, id DESC
), judged AS (
    SELECT l.*, EXISTS (SELECT 1 FROM %[1]s.messages AS m WHERE m.idempotency_key = l.idempotency_key) AS pending
      FROM latest AS l
)`

// queryArchiveReplay inserts the judged rows whose key is not pending into
// the hot table as new rows, in their original order: created now, due now,
// with their original idempotency key, or a new one when $8 is true. With
// original keys it also forgets those keys in delivered_keys, or the relay
// would archive the replay as a duplicate without sending it. It returns
// the archived rows matched, the distinct keys among them, the keys
// pending, the rows inserted and the delivered keys deleted.
const queryArchiveReplay = archiveReplayJudge + `, replayed AS (
    INSERT INTO %[1]s.messages (topic, payload, key, headers, idempotency_key, destination, available_at)
    SELECT topic, payload, key, headers,
           CASE WHEN $8::bool THEN NULL ELSE idempotency_key END,
           destination, now()
      FROM judged
     WHERE NOT pending
     ORDER BY id
        ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING idempotency_key
), forgotten AS (
    DELETE FROM %[1]s.delivered_keys AS k
     USING replayed AS r
     WHERE NOT $8::bool AND k.idempotency_key = r.idempotency_key
    RETURNING 1
)
SELECT (SELECT count(*) FROM matched),
       count(*),
       count(*) FILTER (WHERE pending),
       (SELECT count(*) FROM replayed),
       (SELECT count(*) FROM forgotten)
  FROM judged`

// queryArchiveReplayDry is queryArchiveReplay's judgement without the
// insert, for dry runs, with the same results: the rows that would be
// inserted, and the delivered keys that would be deleted (none when $8, new
// keys, is true).
const queryArchiveReplayDry = archiveReplayJudge + `
SELECT (SELECT count(*) FROM matched),
       count(*),
       count(*) FILTER (WHERE pending),
       count(*) FILTER (WHERE NOT pending),
       (SELECT count(*) FROM %[1]s.delivered_keys AS k
         WHERE NOT $8::bool
           AND k.idempotency_key IN (SELECT idempotency_key FROM judged WHERE NOT pending))
  FROM judged`

// Cancel.

// messagesCancelMatch selects pending rows by $1 key, $2 exact topic, $3
// topic LIKE pattern.
const messagesCancelMatch = `
  FROM %[1]s.messages AS m
 WHERE ($1::text IS NULL OR m.key = $1)
   AND ($2::text IS NULL OR m.topic = $2)
   AND ($3::text IS NULL OR m.topic LIKE $3)`

// queryMessagesCancel moves the matching rows that are not in flight to the
// dead letters with reason $4 and error $5. Rows under a running lease, and
// rows locked by a claim that is committing, are left alone. It returns the
// number matched, the number moved and the keys of the rows moved.
const queryMessagesCancel = `
WITH matched AS (
    SELECT count(*) AS n` + messagesCancelMatch + `
), picked AS (
    SELECT m.id` + messagesCancelMatch + `
       AND (m.leased_until IS NULL OR m.leased_until <= now())
     ORDER BY m.id
       FOR UPDATE SKIP LOCKED
), cancelled AS (
    DELETE FROM %[1]s.messages AS m
     USING picked
     WHERE m.id = picked.id
    RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
              m.created_at, m.attempts, m.available_at
), dead AS (
    INSERT INTO %[1]s.dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                    created_at, attempts, reason, error, available_at)
    SELECT id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, $4::text, $5::text, available_at
      FROM cancelled
    RETURNING 1
)
SELECT (SELECT n FROM matched), (SELECT count(*) FROM dead),
       (SELECT coalesce(array_agg(DISTINCT key), '{}') FROM cancelled WHERE key IS NOT NULL)`

// queryKeysPromote makes the oldest waiting row of each key in $1 a
// candidate again (ordered mode): Cancel runs it after deleting rows, as a
// statement of its own in a READ COMMITTED transaction, as the relay's
// settle runs queryHeadsPromote, with the same rule (relay/sql_heads.go
// says why). The waiting rows are looked up from the smallest id. Its available_at moves to the
// clock's time at the earliest, as the relay's promotions move it (the claim
// floor's rule; the transaction has its id from the delete).
const queryKeysPromote = `
UPDATE %[1]s.messages AS m
   SET waiting = false, available_at = greatest(m.available_at, clock_timestamp())
 WHERE m.id = ANY (ARRAY(
       SELECT (SELECT q.id FROM %[1]s.messages AS q
                WHERE q.waiting AND q.key IS NOT NULL
                  AND (q.key, q.id) >= (k.key, -9223372036854775808) AND (q.key, q.id) <= (k.key, 9223372036854775807)
                ORDER BY q.key, q.id LIMIT 1)
         FROM unnest($1::text[]) AS k(key)))
   AND coalesce(m.waiting, false)`

// queryMessagesCancelDry counts the matching rows and those in flight.
const queryMessagesCancelDry = `
SELECT count(*), count(*) FILTER (WHERE m.leased_until > now())` + messagesCancelMatch

// render returns q for schema, which must be valid.
func render(q, schema string) string {
	return fmt.Sprintf(q, outbox.QuoteSchema(schema))
}
