package admin

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Every statement the operations run, in the relay's dialect
// (relay/sql.go): {schema} is the quoted schema, filled in once per Admin
// (New: renderQueries); @name is an argument of each execution, passed as
// pgx.StrictNamedArgs, so that a statement fails rather than run with one
// missing; rows are read by column name into structs (their db tags).
// Optional filters arrive as NULL arguments and drop out ("@x IS NULL OR
// …"), so that each statement is one constant; the values are known when
// the statement is planned, so the planner still uses the indexes they
// allow. The final text of every statement is in testdata/<name>.sql
// (TestGoldenSQL). The holders of the xmin horizon are read by
// relay/internal/horizon, with the relay's definition of who holds it.
//
// Comparisons between idempotency keys mix the "C" collation of the hot
// table and delivered_keys with the default collation of the other tables;
// PostgreSQL resolves them to "C", the collation of the indexes.
//
// The hot table rotates (migration 24): every statement that reads,
// updates, deletes or locks pending rows names messages_all, the parent
// of every generation's table, and sees them all; the statements that put
// rows back (dead letters retried, archived rows replayed) insert into
// messages, the current generation, whose insert guard sets their id and
// relay columns. An index named here (messages_key_idx, …) is each
// generation's copy of it (messages_g<slot>_key_idx, …).

// Status.

// queryRelayMode returns the database's clock (the snapshot's time, which
// ages are measured from), the schema's mode and when and by which relay
// it last changed.
const queryRelayMode = `
SELECT now() AS at, mode, changed_at, coalesce(changed_by, '') AS changed_by
  FROM {schema}.relay_mode`

// queryMessagesStatus summarises the hot table per destination
// (@default_sink stands for null) in one scan, with the relay's
// definitions: in flight while a lease runs, due when available and not
// leased, in backoff when a failed row waits for its retry, delayed when a
// row that was never tried waits for its available_at. When @ordered
// (ordered mode), a keyed row behind an older row of its key is waiting,
// not due.
const queryMessagesStatus = `
SELECT coalesce(destination, @default_sink) AS destination,
       count(*) AS pending,
       count(*) FILTER (WHERE due AND NOT waiting) AS due,
       min(available_at) FILTER (WHERE due AND NOT waiting) AS oldest_due_at,
       count(*) FILTER (WHERE in_flight) AS in_flight,
       count(*) FILTER (WHERE backoff) AS backoff,
       min(available_at) FILTER (WHERE backoff) AS next_retry_at,
       count(*) FILTER (WHERE delayed AND NOT waiting) AS delayed,
       min(available_at) FILTER (WHERE delayed AND NOT waiting) AS next_delayed_at,
       count(*) FILTER (WHERE waiting) AS waiting
  FROM (SELECT destination, available_at,
               available_at <= now() AND (leased_until IS NULL OR leased_until <= now()) AS due,
               leased_until > now() AS in_flight,
               available_at > now() AND leased_by IS NULL AND attempts > 0 AS backoff,
               available_at > now() AND attempts = 0 AS delayed,
               @ordered AND key IS NOT NULL AND id <> min(id) OVER (PARTITION BY key) AND attempts = 0 AS waiting
          FROM {schema}.messages_all) AS m
 GROUP BY 1
 ORDER BY 1`

// queryBackoffByError groups the rows waiting for a retry by their last
// error, the @limit most frequent first, with the earliest retry of each.
const queryBackoffByError = `
SELECT coalesce(last_error, '') AS error, count(*) AS count, min(available_at) AS next_retry_at
  FROM {schema}.messages_all
 WHERE available_at > now() AND leased_by IS NULL AND attempts > 0
 GROUP BY 1
 ORDER BY 2 DESC, 3
 LIMIT @limit`

// queryDeliveredPerMinute counts the rows archived in each of the last
// @minutes minutes (this one included), delivered and deduplicated apart.
// The archive is read once, from the first minute on (through
// archive_delivered_at_idx), and counted per minute before the minutes are
// joined. A join of each minute with its rows was estimated from the
// thousand rows PostgreSQL assumes of generate_series, each joined with a
// ninth of the archive: on a million archived rows (a week's), the
// estimate passed jit_above_cost and PostgreSQL compiled the statement
// for 157 ms of its 242 (of 60 minutes; 6 ms now), on a connection that
// left JIT on.
const queryDeliveredPerMinute = `
SELECT m.minute, coalesce(a.delivered, 0) AS delivered, coalesce(a.deduplicated, 0) AS deduplicated
  FROM generate_series(date_trunc('minute', now()) - (@minutes - 1) * interval '1 minute', date_trunc('minute', now()), interval '1 minute') AS m(minute)
  LEFT JOIN (SELECT date_trunc('minute', delivered_at) AS minute,
                    count(*) FILTER (WHERE NOT duplicate) AS delivered,
                    count(*) FILTER (WHERE duplicate) AS deduplicated
               FROM {schema}.archive
              WHERE delivered_at >= date_trunc('minute', now()) - (@minutes - 1) * interval '1 minute'
              GROUP BY 1) AS a
    ON a.minute = m.minute
 ORDER BY 1`

// queryRelaysStatus lists the relays registered on the schema, alive ones
// first; a relay seen within @alive is alive. claim_floor_lag is what each
// recorded at its last heartbeat.
const queryRelaysStatus = `
SELECT id, version, mode, started_at, last_seen, last_seen > now() - @alive::interval AS alive,
       claim_floor_lag
  FROM {schema}.relays
 ORDER BY alive DESC, id`

// queryBlockedKeys returns, in ordered mode, the @limit keys whose head
// (their oldest row) has failed, oldest head first: the head's age,
// attempts, next retry and last error, and the rows of the key. Heads are
// found among the candidates (rows that do not wait behind an older row of
// their key, through messages_heads_due_idx), then checked to be their
// key's oldest row, looked up as the relay's lookups of a key's oldest row
// are (relay's ofKey): the key bounded in row comparisons, so that
// PostgreSQL cannot take the primary key in id order for it.
const queryBlockedKeys = `
SELECT h.key, h.created_at AS head_created_at, h.attempts, h.available_at AS next_attempt_at,
       coalesce(h.leased_until > now(), false) AS in_flight, coalesce(h.last_error, '') AS last_error,
       (SELECT count(*) FROM {schema}.messages_all AS k WHERE k.key = h.key) AS rows
  FROM {schema}.messages_all AS h
 WHERE h.key IS NOT NULL AND NOT h.waiting
   AND h.attempts > 0 AND h.last_error IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM {schema}.messages_all AS o
                    WHERE o.key IS NOT NULL AND (o.key, o.id) >= (h.key, -9223372036854775808) AND (o.key, o.id) < (h.key, h.id))
 ORDER BY h.created_at
 LIMIT @limit`

// queryMessagesLeases counts the rows in flight per relay.
const queryMessagesLeases = `
SELECT coalesce(leased_by, '') AS relay_id, count(*) AS rows,
       min(leased_until) AS earliest_lease_end, max(leased_until) AS latest_lease_end
  FROM {schema}.messages_all
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
      FROM {schema}.buckets
), rows AS (
    SELECT {schema}.messages_bucket(key, id) AS bucket,
           count(*) FILTER (WHERE available_at <= now() AND (leased_until IS NULL OR leased_until <= now())) AS due,
           count(*) FILTER (WHERE leased_until > now()) AS in_flight
      FROM {schema}.messages_all
     GROUP BY 1
)
SELECT o.owner AS relay_id, array_agg(o.bucket ORDER BY o.bucket) AS buckets, max(o.epoch) AS epoch,
       min(o.lease_until) FILTER (WHERE o.owner <> '') AS lease_until,
       (SELECT r.last_seen FROM {schema}.relays AS r WHERE r.id = o.owner) AS last_seen,
       coalesce(sum(r.due), 0)::bigint AS due, coalesce(sum(r.in_flight), 0)::bigint AS in_flight
  FROM owners AS o LEFT JOIN rows AS r ON r.bucket = o.bucket
 GROUP BY o.owner
 ORDER BY o.owner = '', o.owner`

// queryDeadLettersByReason counts the dead letters per reason.
const queryDeadLettersByReason = `
SELECT reason AS value, count(*) AS count, max(failed_at) AS last_failed_at
  FROM {schema}.dead_letters
 GROUP BY reason
 ORDER BY 2 DESC, 1`

// queryDeadLettersSummary counts the dead letters per reason and per error
// text in one pass over the table (grouping sets), which Status splits:
// the reasons all, the @limit most frequent errors. Two statements read
// the table twice, and it holds the payloads stored in line: 45–60 ms
// each over 100,000 dead letters.
const queryDeadLettersSummary = `
SELECT GROUPING(reason) = 0 AS by_reason, coalesce(reason, error) AS value, count(*) AS count,
       max(failed_at) AS last_failed_at
  FROM {schema}.dead_letters
 GROUP BY GROUPING SETS ((reason), (error))`

// queryTablesStatus reads the size and vacuum statistics of the relay's
// tables in schema @schema_name (the plain name), each summed over its
// partitions (the archive and the delivered keys are partitioned by time,
// relay/internal/history; a plain table is its own one partition) and,
// for messages, over every generation's table (message_generations,
// migration 24: the hot table rotates, and the tables named messages_g<slot>
// hold rows too); the vacuums are the latest of any partition. n_live_tup
// is the statistics system's running estimate of the row count.
// queryGenerations lists the hot table's generations (migration 24,
// relay/internal/rotation): slot, turn, state, table, since when, whether
// messages_all reads it, and its rows (the statistics' estimates) and
// bytes.
const queryGenerations = `
SELECT slot, generation, state, table_name, since, attached, live_rows, dead_rows, total_bytes
  FROM {schema}.messages_generations()`

const queryTablesStatus = `
SELECT t.name AS "table", sum(pg_total_relation_size(p.relid))::bigint AS total_bytes,
       coalesce(sum(s.n_live_tup), 0)::bigint AS live_tuples, coalesce(sum(s.n_dead_tup), 0)::bigint AS dead_tuples,
       max(s.last_vacuum) AS last_vacuum, max(s.last_autovacuum) AS last_autovacuum
  FROM unnest(ARRAY['messages', 'archive', 'delivered_keys', 'dead_letters']::name[]) WITH ORDINALITY AS t (name, ord)
 CROSS JOIN LATERAL (SELECT g.relid AS oid FROM {schema}.message_generations AS g WHERE t.name = 'messages'
                     UNION ALL
                     SELECT format('%I.%I', @schema_name::text, t.name)::regclass WHERE t.name <> 'messages') AS c
 CROSS JOIN LATERAL (SELECT tree.relid FROM pg_catalog.pg_partition_tree(c.oid) AS tree WHERE tree.isleaf
                     UNION ALL
                     SELECT k.oid FROM pg_catalog.pg_class AS k WHERE k.oid = c.oid AND k.relkind = 'r') AS p
  LEFT JOIN pg_catalog.pg_stat_user_tables AS s ON s.relid = p.relid
 GROUP BY t.name, t.ord
 ORDER BY t.ord`

// queryArchiveCountExact counts the archive and the delivered keys exactly:
// two full scans, for StatusOptions.ExactCounts.
const queryArchiveCountExact = `
SELECT (SELECT count(*) FROM {schema}.archive) AS archive_rows,
       (SELECT count(*) FROM {schema}.delivered_keys) AS delivered_keys_rows`

// Dead letters.

// deadLettersMatch selects dead letters by the DeadFilter arguments
// (DeadFilter.args): @ids, @topic exactly, @topic_pattern (LIKE), @key,
// @reason, @error_pattern (ILIKE), @error_is (the error text exactly),
// failed at or after @since and at or before @until, @destination (DefaultSinkLabel for none), at
// most @limit (NULL: all), oldest failure first.
const deadLettersMatch = `
  FROM {schema}.dead_letters AS d
 WHERE (@ids::bigint[] IS NULL OR d.id = ANY (@ids))
   AND (@topic::text IS NULL OR d.topic = @topic)
   AND (@topic_pattern::text IS NULL OR d.topic LIKE @topic_pattern)
   AND (@key::text IS NULL OR d.key = @key)
   AND (@reason::text IS NULL OR d.reason = @reason)
   AND (@error_pattern::text IS NULL OR d.error ILIKE @error_pattern)
   AND (@error_is::text IS NULL OR d.error = @error_is)
   AND (@since::timestamptz IS NULL OR d.failed_at >= @since)
   AND (@until::timestamptz IS NULL OR d.failed_at <= @until)
   AND (@destination::text IS NULL OR d.destination = @destination OR (@destination = '` + DefaultSinkLabel + `' AND d.destination IS NULL))
 ORDER BY d.failed_at, d.id
 LIMIT @limit`

// queryDeadLettersList returns the matching dead letters, without their
// payloads, and how many match in all.
const queryDeadLettersList = `
SELECT d.id, d.topic, coalesce(d.key, '') AS key, d.idempotency_key, coalesce(d.destination, '') AS destination,
       d.attempts, d.reason, d.error, d.failed_at, d.created_at, octet_length(d.payload) AS payload_bytes,
       count(*) OVER () AS matched` + deadLettersMatch

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
               WHEN EXISTS (SELECT 1 FROM {schema}.delivered_keys AS k WHERE k.idempotency_key = p.idempotency_key) THEN 'delivered'
               WHEN EXISTS (SELECT 1 FROM {schema}.messages_all AS m WHERE m.idempotency_key = p.idempotency_key) THEN 'pending'
               WHEN row_number() OVER (PARTITION BY p.idempotency_key ORDER BY p.id DESC) > 1 THEN 'pending'
               ELSE 'retry'
           END AS verdict
      FROM picked AS p
)`

// queryDeadLettersRetry moves the matching dead letters that can go back to
// the hot table as new rows: a new id, attempts 0, due now (a cancelled row
// whose available_at is still ahead keeps it), no lease and no last error,
// with their payload, headers and keys (created now: the insert guard sets
// created_at), and their topic and destination unless @set_topic or
// @set_destination (DefaultSinkLabel for none) re-route them. They are
// inserted into messages, the current generation; the judgement looks for
// a pending row with their key in every generation (messages_all). ON
// CONFLICT covers a row with the same key inserted since the judgement
// (into messages: the key is unique per generation's table); only dead
// letters whose row was inserted are deleted. It returns the number
// matched, the number moved (retried), the ids of those left because
// their key was delivered, and the database's time.
const queryDeadLettersRetry = `
WITH picked AS (
    SELECT d.id, d.idempotency_key` + deadLettersMatch + `
       FOR UPDATE SKIP LOCKED` + deadLettersJudge + `, moved AS (
    INSERT INTO {schema}.messages (topic, payload, key, headers, idempotency_key, destination, available_at)
    SELECT coalesce(@set_topic::text, d.topic), d.payload, d.key, d.headers, d.idempotency_key,
           CASE WHEN @set_destination::text IS NULL THEN d.destination WHEN @set_destination = '` + DefaultSinkLabel + `' THEN NULL ELSE @set_destination END,
           CASE WHEN d.reason = 'cancelled' AND d.available_at > now() THEN d.available_at ELSE now() END
      FROM judged AS j
      JOIN {schema}.dead_letters AS d ON d.id = j.id
     WHERE j.verdict = 'retry'
     ORDER BY d.id
        ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING idempotency_key
), deleted AS (
    DELETE FROM {schema}.dead_letters AS d
     USING judged AS j, moved
     WHERE d.id = j.id AND j.verdict = 'retry' AND moved.idempotency_key = j.idempotency_key
    RETURNING d.id
)
SELECT count(*) AS matched,
       (SELECT count(*) FROM deleted) AS retried,
       coalesce(array_agg(id ORDER BY id) FILTER (WHERE verdict = 'delivered'), '{}') AS delivered_ids,
       now() AS as_of
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
// move, for dry runs: matched, would move (retried), delivered ids, and
// the database's time (as_of), which the confirmed retry gives as @until.
const queryDeadLettersRetryDry = `
WITH picked AS (
    SELECT d.id, d.idempotency_key` + deadLettersMatch + deadLettersJudge + `
SELECT count(*) AS matched,
       count(*) FILTER (WHERE verdict = 'retry') AS retried,
       coalesce(array_agg(id ORDER BY id) FILTER (WHERE verdict = 'delivered'), '{}') AS delivered_ids,
       now() AS as_of
  FROM judged`

// queryDeadLettersPurge deletes the matching dead letters.
const queryDeadLettersPurge = `
WITH picked AS (
    SELECT d.id` + deadLettersMatch + `
       FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.dead_letters AS d
 USING picked
 WHERE d.id = picked.id`

// queryDeadLettersPurgeDry counts what queryDeadLettersPurge would delete,
// with the database's time (as_of), which the confirmed purge gives as
// @until.
const queryDeadLettersPurgeDry = `
SELECT count(*) AS purged, now() AS as_of FROM (SELECT d.id` + deadLettersMatch + `) AS picked`

// queryDeadLettersGroups groups the dead letters by cause (reason and
// error text), the @limit most numerous first, ties by latest failure,
// each with its first and last failure, its distinct topics and its newest
// letter (latest failure, then highest id), and with the dead letters and
// groups in all. The table is read once and hashed by cause and topic,
// then by cause: a count(DISTINCT topic), or the newest id ordered within
// each group, would sort every dead letter by its error text (300 ms for
// 100,000 of them, spilled to disk). The newest letter of each group
// listed is looked up by its last failure, through
// dead_letters_failed_at_idx.
const queryDeadLettersGroups = `
WITH by_topic AS (
    SELECT reason, error, topic, count(*) AS count, min(failed_at) AS first_failed_at, max(failed_at) AS last_failed_at
      FROM {schema}.dead_letters
     GROUP BY reason, error, topic
), groups AS (
    SELECT reason, error, sum(count)::bigint AS count, min(first_failed_at) AS first_failed_at,
           max(last_failed_at) AS last_failed_at, count(*) AS topics,
           sum(sum(count)) OVER ()::bigint AS total, count(*) OVER () AS groups
      FROM by_topic
     GROUP BY reason, error
     ORDER BY 3 DESC, 5 DESC, reason, error
     LIMIT @limit
)
SELECT g.reason, g.error, g.count, g.first_failed_at, g.last_failed_at, g.topics, g.total, g.groups,
       (SELECT max(d.id) FROM {schema}.dead_letters AS d
         WHERE d.failed_at = g.last_failed_at AND d.reason = g.reason AND d.error = g.error) AS example_id
  FROM groups AS g
 ORDER BY g.count DESC, g.last_failed_at DESC, g.reason, g.error`

// queryDeadLetterDetail returns the dead letter @id with its headers, its
// first error (empty when it failed once), its available_at and the first
// @preview bytes of its payload (substring
// reads no more of a payload stored out of line than it returns). Headers
// that are a JSON object are returned as an object of strings: a value
// that is not a string as its JSON text ("null" for null); headers that
// are some other JSON value, written by hand, as one entry named "" with
// their text; SQL and JSON null as NULL.
const queryDeadLetterDetail = `
SELECT d.id, d.topic, coalesce(d.key, '') AS key, d.idempotency_key, coalesce(d.destination, '') AS destination,
       d.attempts, d.reason, d.error, coalesce(d.first_error, '') AS first_error, d.failed_at, d.created_at,
       octet_length(d.payload) AS payload_bytes,
       CASE WHEN jsonb_typeof(d.headers) = 'object'
            THEN coalesce((SELECT jsonb_object_agg(h.key, coalesce(h.value, 'null')) FROM jsonb_each_text(d.headers) AS h), '{}')
            WHEN jsonb_typeof(d.headers) <> 'null'
            THEN jsonb_build_object('', d.headers #>> '{}')
       END AS headers,
       d.available_at, substring(d.payload FROM 1 FOR @preview::integer) AS payload,
       octet_length(d.payload) > @preview::integer AS payload_truncated
  FROM {schema}.dead_letters AS d
 WHERE d.id = @id`

// keyHistoryOfKey takes, from the table aliased k, the @limit + 1 newest
// rows with the ordering key @key, in the order of the table's (key, id)
// index (messages_key_idx, archive_key_idx, dead_letters_key_idx: partial,
// WHERE key IS NOT NULL, which it states), read backwards. It bounds the
// key in row comparisons, not as k.key = @key, as the relay's lookups of
// a key's rows do (relay's ofKey): with the key equal to one value
// PostgreSQL drops it from the order, and a primary key on id (the hot
// table's, the dead letters') then gives id order too, walking the rows
// of every key from the newest.
const keyHistoryOfKey = `
      WHERE k.key IS NOT NULL
        AND (k.key, k.id) >= (@key::text, -9223372036854775808) AND (k.key, k.id) <= (@key::text, 9223372036854775807)
      ORDER BY k.key DESC, k.id DESC
      LIMIT @limit::bigint + 1`

// queryKeyHistory returns the @limit + 1 newest rows with the ordering key
// @key among the hot table, the archive and the dead letters, newest (by
// id) first, each with where it is now (the Key… constants): in the hot
// table in flight while its lease runs, else pending when due, else
// delayed when never tried, else in backoff (queryMessagesStatus's
// definitions); in the archive delivered or deduplicated; or a dead
// letter. Each table gives its @limit + 1 newest rows of the key
// (keyHistoryOfKey) before they are merged. at is the hot table's
// available_at, the archive's delivered_at, the dead letter's failed_at.
const queryKeyHistory = `
SELECT r.* FROM (
    (SELECT k.id,
            CASE WHEN k.leased_until > now() THEN '` + KeyInFlight + `'
                 WHEN k.available_at <= now() THEN '` + KeyPending + `'
                 WHEN k.attempts = 0 THEN '` + KeyDelayed + `'
                 ELSE '` + KeyBackoff + `'
            END AS "where",
            k.topic, k.idempotency_key, coalesce(k.destination, '') AS destination, k.attempts, k.created_at,
            k.available_at AS at, coalesce(k.last_error, '') AS error, '' AS reason, coalesce(k.leased_by, '') AS leased_by,
            octet_length(k.payload) AS payload_bytes
       FROM {schema}.messages_all AS k` + keyHistoryOfKey + `)
    UNION ALL
    (SELECT k.id, CASE WHEN k.duplicate THEN '` + KeyDeduplicated + `' ELSE '` + KeyDelivered + `' END,
            k.topic, k.idempotency_key, coalesce(k.destination, ''), k.attempts, k.created_at,
            k.delivered_at, '', '', '', octet_length(k.payload)
       FROM {schema}.archive AS k` + keyHistoryOfKey + `)
    UNION ALL
    (SELECT k.id, '` + KeyDead + `',
            k.topic, k.idempotency_key, coalesce(k.destination, ''), k.attempts, k.created_at,
            k.failed_at, k.error, k.reason, '', octet_length(k.payload)
       FROM {schema}.dead_letters AS k` + keyHistoryOfKey + `)
) AS r
 ORDER BY r.id DESC
 LIMIT @limit::bigint + 1`

// Replay.

// archiveReplayJudge selects delivered (not duplicate) archived rows by
// the ReplayOptions arguments (ReplayOptions.args): delivered_at from
// @delivered_from (inclusive) to @delivered_to (exclusive), created_at
// from @created_from to @created_to, @topic exactly, @topic_pattern
// (LIKE), @key; keeps the most recent delivery of each idempotency key;
// and marks those whose key is pending in the hot table (in any of its
// generations: messages_all).
const archiveReplayJudge = `
WITH matched AS (
    SELECT a.id, a.topic, a.payload, a.key, a.headers, a.idempotency_key, a.destination, a.delivered_at
      FROM {schema}.archive AS a
     WHERE NOT a.duplicate
       AND (@delivered_from::timestamptz IS NULL OR a.delivered_at >= @delivered_from)
       AND (@delivered_to::timestamptz IS NULL OR a.delivered_at < @delivered_to)
       AND (@created_from::timestamptz IS NULL OR a.created_at >= @created_from)
       AND (@created_to::timestamptz IS NULL OR a.created_at < @created_to)
       AND (@topic::text IS NULL OR a.topic = @topic)
       AND (@topic_pattern::text IS NULL OR a.topic LIKE @topic_pattern)
       AND (@key::text IS NULL OR a.key = @key)
), latest AS (
    SELECT DISTINCT ON (idempotency_key) *
      FROM matched
     ORDER BY idempotency_key, delivered_at DESC, id DESC
), judged AS (
    SELECT l.*, EXISTS (SELECT 1 FROM {schema}.messages_all AS m WHERE m.idempotency_key = l.idempotency_key) AS pending
      FROM latest AS l
)`

// queryArchiveReplay inserts the judged rows whose key is not pending into
// the hot table (messages, its current generation) as new rows, in their
// original order: created now, due now,
// with their original idempotency key, or a new one when @new_keys. With
// original keys it also forgets those keys in delivered_keys, or the relay
// would archive the replay as a duplicate without sending it. It returns
// the archived rows matched, the distinct keys among them (events), the
// keys pending, the rows inserted (replayed) and the delivered keys
// deleted (forgotten).
const queryArchiveReplay = archiveReplayJudge + `, replayed AS (
    INSERT INTO {schema}.messages (topic, payload, key, headers, idempotency_key, destination, available_at)
    SELECT topic, payload, key, headers,
           CASE WHEN @new_keys::bool THEN NULL ELSE idempotency_key END,
           destination, now()
      FROM judged
     WHERE NOT pending
     ORDER BY id
        ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING idempotency_key
), forgotten AS (
    DELETE FROM {schema}.delivered_keys AS k
     USING replayed AS r
     WHERE NOT @new_keys::bool AND k.idempotency_key = r.idempotency_key
    RETURNING 1
)
SELECT (SELECT count(*) FROM matched) AS matched,
       count(*) AS events,
       count(*) FILTER (WHERE pending) AS skipped_pending,
       (SELECT count(*) FROM replayed) AS replayed,
       (SELECT count(*) FROM forgotten) AS forgotten_keys
  FROM judged`

// queryArchiveReplayDry is queryArchiveReplay's judgement without the
// insert, for dry runs, with the same results: the rows that would be
// inserted, and the delivered keys that would be deleted (none with
// @new_keys).
const queryArchiveReplayDry = archiveReplayJudge + `
SELECT (SELECT count(*) FROM matched) AS matched,
       count(*) AS events,
       count(*) FILTER (WHERE pending) AS skipped_pending,
       count(*) FILTER (WHERE NOT pending) AS replayed,
       (SELECT count(*) FROM {schema}.delivered_keys AS k
         WHERE NOT @new_keys::bool
           AND k.idempotency_key IN (SELECT idempotency_key FROM judged WHERE NOT pending)) AS forgotten_keys
  FROM judged`

// Cancel.

// messagesCancelMatch selects pending rows by @key, @topic exactly and
// @topic_pattern (LIKE).
const messagesCancelMatch = `
  FROM {schema}.messages_all AS m
 WHERE (@key::text IS NULL OR m.key = @key)
   AND (@topic::text IS NULL OR m.topic = @topic)
   AND (@topic_pattern::text IS NULL OR m.topic LIKE @topic_pattern)`

// queryMessagesCancel moves the matching rows that are not in flight to the
// dead letters with reason @reason and error @error. Rows under a running
// lease, and rows locked by a claim that is committing, are left alone. It
// returns the number matched, the number moved (cancelled) and the keys of
// the rows moved.
const queryMessagesCancel = `
WITH matched AS (
    SELECT count(*) AS n` + messagesCancelMatch + `
), picked AS (
    SELECT m.id` + messagesCancelMatch + `
       AND (m.leased_until IS NULL OR m.leased_until <= now())
     ORDER BY m.id
       FOR UPDATE SKIP LOCKED
), cancelled AS (
    DELETE FROM {schema}.messages_all AS m
     USING picked
     WHERE m.id = picked.id
    RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
              m.created_at, m.attempts, m.available_at, coalesce(m.first_error, m.last_error) AS first_error
), dead AS (
    INSERT INTO {schema}.dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                       created_at, attempts, reason, error, available_at, first_error)
    SELECT id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, @reason::text, @error::text, available_at,
           first_error
      FROM cancelled
    RETURNING 1
)
SELECT (SELECT n FROM matched) AS matched, (SELECT count(*) FROM dead) AS cancelled,
       (SELECT coalesce(array_agg(DISTINCT key), '{}') FROM cancelled WHERE key IS NOT NULL) AS keys`

// queryRotationShared waits for the hot table's rotation round to finish
// its step, and keeps the next from starting, until the transaction ends
// (a shared hold of the lock the rotation's functions take exclusively,
// migration 24). Cancel takes it before its delete: a carry moves waiting
// rows from one generation's table to another's in a transaction of its
// own, and a delete that started before that transaction committed would
// find the row gone from the old table and not see it in the new one.
const queryRotationShared = `
SELECT pg_advisory_xact_lock_shared(hashtext('outbox-relay rotation {schema}'))`

// queryKeysPromote makes the oldest waiting row of each key in @keys a
// candidate again (ordered mode): Cancel runs it after deleting rows, as a
// statement of its own in a READ COMMITTED transaction, as the relay's
// settle runs queryHeadsPromote, with the same rule (relay/sql_heads.go
// says why). The waiting rows are looked up from the smallest id. Its
// available_at moves to the clock's time at the earliest, as the relay's
// promotions move it (the claim floor's rule; the transaction has its id
// from the delete).
const queryKeysPromote = `
UPDATE {schema}.messages_all AS m
   SET waiting = false, available_at = greatest(m.available_at, clock_timestamp())
 WHERE m.id = ANY (ARRAY(
       SELECT (SELECT q.id FROM {schema}.messages_all AS q
                WHERE q.waiting AND q.key IS NOT NULL
                  AND (q.key, q.id) >= (k.key, -9223372036854775808) AND (q.key, q.id) <= (k.key, 9223372036854775807)
                ORDER BY q.key, q.id LIMIT 1)
         FROM unnest(@keys::text[]) AS k(key)))
   AND coalesce(m.waiting, false)`

// queryMessagesCancelDry counts the matching rows, those in flight, and
// those a cancel would move (the others).
const queryMessagesCancelDry = `
SELECT count(*) AS matched,
       count(*) FILTER (WHERE m.leased_until IS NULL OR m.leased_until <= now()) AS cancelled,
       count(*) FILTER (WHERE m.leased_until > now()) AS in_flight` + messagesCancelMatch

// queries holds every statement of the operations, rendered for one
// schema.
type queries struct {
	relayMode, messagesStatus, backoffByError, deliveredPerMinute string
	relaysStatus, blockedKeys, messagesLeases, bucketOwners       string
	deadLettersByReason, deadLettersSummary                       string
	tablesStatus, archiveCountExact, generations                  string

	deadLettersGroups, deadLetterDetail, keyHistory string

	deadLettersList, deadLettersRetry, deadLettersRetryJudged, deadLettersRetryDry string
	deadLettersPurge, deadLettersPurgeDry                                          string

	archiveReplay, archiveReplayDry string

	messagesCancel, messagesCancelDry, keysPromote, rotationShared string
}

// renderQueries renders every statement for schema, which must be valid.
func renderQueries(schema string) queries {
	quoted := outbox.QuoteSchema(schema)
	f := func(q string) string { return render(q, quoted) }
	return queries{
		relayMode:              f(queryRelayMode),
		messagesStatus:         f(queryMessagesStatus),
		backoffByError:         f(queryBackoffByError),
		deliveredPerMinute:     f(queryDeliveredPerMinute),
		relaysStatus:           f(queryRelaysStatus),
		blockedKeys:            f(queryBlockedKeys),
		messagesLeases:         f(queryMessagesLeases),
		bucketOwners:           f(queryBucketOwners),
		deadLettersByReason:    f(queryDeadLettersByReason),
		deadLettersSummary:     f(queryDeadLettersSummary),
		tablesStatus:           f(queryTablesStatus),
		archiveCountExact:      f(queryArchiveCountExact),
		generations:            f(queryGenerations),
		deadLettersGroups:      f(queryDeadLettersGroups),
		deadLetterDetail:       f(queryDeadLetterDetail),
		keyHistory:             f(queryKeyHistory),
		deadLettersList:        f(queryDeadLettersList),
		deadLettersRetry:       f(queryDeadLettersRetry),
		deadLettersRetryJudged: f(queryDeadLettersRetryJudged),
		deadLettersRetryDry:    f(queryDeadLettersRetryDry),
		deadLettersPurge:       f(queryDeadLettersPurge),
		deadLettersPurgeDry:    f(queryDeadLettersPurgeDry),
		archiveReplay:          f(queryArchiveReplay),
		archiveReplayDry:       f(queryArchiveReplayDry),
		messagesCancel:         f(queryMessagesCancel),
		messagesCancelDry:      f(queryMessagesCancelDry),
		keysPromote:            f(queryKeysPromote),
		rotationShared:         f(queryRotationShared),
	}
}

// slotPattern matches a slot left in a rendered statement.
var slotPattern = regexp.MustCompile(`\{[a-z_]+\}`)

// render fills the {schema} slot of q with the quoted schema. A slot left
// unfilled is a bug in this package: it panics.
func render(q, quotedSchema string) string {
	q = strings.ReplaceAll(q, "{schema}", quotedSchema)
	if left := slotPattern.FindString(q); left != "" {
		panic(fmt.Sprintf("admin: statement rendered with its slot %s unfilled:\n%s", left, q))
	}
	return q
}
