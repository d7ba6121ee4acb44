package relay

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// The statements of the relay, as named constants: one file for the
// statements every mode runs (this one), one for ordered mode's heads
// (sql_heads.go) and one for the buckets (sql_buckets.go). Two kinds of names mark what a
// statement is given:
//
//   - {slot}: text filled in once, when a Relay renders its statements:
//     {schema} is the quoted schema, and a mode fills the slots of the
//     claim and the settle it runs (an empty slot leaves the part out);
//   - @name: an argument of each execution, passed as pgx.StrictNamedArgs,
//     so that a statement fails rather than run with one missing.
//
// The final text of every statement of every mode is in
// testdata/<mode>/<statement>.sql (TestGoldenSQL).
//
// Three habits keep the plans from walking an index that does not bound
// them, which costs every dead entry a pinned horizon keeps and which the
// planner chooses when ANALYZE last saw a nearly empty table
// (lookup_by_id_test.go):
//
//   - lookups by id leave the due indexes to the statements that bound
//     available_at (they are partial, migration 10); one that also asks
//     whether a row is due asks it inside a row comparison, which does not
//     imply their predicate;
//   - lookups of a key's rows name the order of messages_key_idx (ORDER BY
//     key, id; (key, id) < (…) for older rows), which the primary key
//     cannot give, and bound the key in row comparisons (ofKey) rather than
//     as key = …, which would drop it from the order and let the primary
//     key give id order;
//   - in partitioned mode, the bucket walk bounds available_at inside row
//     comparisons led by the bucket, which messages_due_idx cannot serve,
//     and states the bucket index's predicate, which no other statement
//     does (migration 11).

// planPerExecution runs a statement as PostgreSQL's unnamed prepared
// statement, which is parsed and planned for the arguments of each
// execution (with the description cached by pgx, still one round trip): a
// cached generic plan does not know the arguments, nor how much the tables
// grew since it was made, and can be badly wrong. The gauges, the repairs
// and the sampled claim run so, seldom. Claims and settles, which run all
// the time, are prepared statements in pipelines of their own instead
// (claimInIndexOrder, settleInPipeline), planned per execution by a
// setting of their transaction (plan_cache_mode), which saves parsing them
// each time.
const planPerExecution = pgx.QueryExecModeCacheDescribe

// slotPattern matches a slot.
var slotPattern = regexp.MustCompile(`\{[a-z_]+\}`)

// render fills the slots of q: {schema} with the quoted schema, the others
// from slots (fragments may hold slots themselves). A slot left unfilled is
// a bug in the relay: it panics.
func render(q, schema string, slots map[string]string) string {
	pairs := []string{"{schema}", outbox.QuoteSchema(schema)}
	for name, text := range slots {
		pairs = append(pairs, "{"+name+"}", text)
	}
	fill := strings.NewReplacer(pairs...)
	for range 3 {
		q = fill.Replace(q)
	}
	if left := slotPattern.FindString(q); left != "" {
		panic(fmt.Sprintf("relay: statement rendered with its slot %s unfilled:\n%s", left, q))
	}
	return q
}

// Rows are untrusted: a producer may have written anything into the relay's
// columns (the messages_guard trigger resets them at insert, but a session
// with session_replication_role = replica skips triggers). The claims
// therefore never overflow a counter and read a lease that ends more than
// 24 hours ahead, which no relay sets (Config.Lease is at most an hour), as
// over.
const (
	// leaseOver holds for a row that no lease holds. The interval is in
	// hours, not a day: the claims evaluate it for every leased row they
	// walk, and adding a day to a timestamptz goes through the calendar and
	// the time zone (85 ns here), adding hours does not (12 ns).
	leaseOver = `(leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')`
	// nextAttempt is attempts + 1, kept below the integer's range.
	nextAttempt = `least(greatest(m.attempts, 0), 1000000) + 1`
	// nextClaimSeq is claim_seq + 1, wrapping before the integer's range
	// ends: the fencing token needs only to differ from the last claim's.
	nextClaimSeq = `CASE WHEN m.claim_seq >= 2147483646 OR m.claim_seq < 0 THEN 1 ELSE m.claim_seq + 1 END`
)

// withinBytes selects, from the rows of the CTE from (id, leased_by,
// available_at, size), oldest first, those whose payloads add up to at most
// @byte_budget, and the first row whatever its size when @oversized is true
// (the relay holds nothing else): a claim never leases more payload bytes
// than the relay may hold, and a row larger than its share of the budget
// still goes, alone. A payload larger than the whole budget counts as
// nothing (payloadSize): the claim does not read it (readPayload).
func withinBytes(from string) string {
	return `
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM ` + from + `) AS s
     WHERE upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool)`
}

// noBucket is the bucket leaseRows returns where rows are not claimed by
// bucket.
const noBucket = "0"

// leaseRows leases the rows whose ids the CTE from holds (id, leased_by:
// set when the row's lease had expired) to relay @relay_id for @lease, and
// returns what every claim returns per row: the message, its attempt and
// claim_seq, whether it was rescued from an expired lease, and whether its
// idempotency key was already delivered (a LIMIT 1 subquery, so that the
// planner probes the index per row instead of hashing the whole key table;
// only for keys the producer chose, dedup: a generated key cannot have been
// delivered), and its bucket: the expression bucket (messages_bucket where
// rows are claimed by bucket, noBucket elsewhere, which need not pay for it
// on every row). It writes no indexed column, so the update is HOT.
func leaseRows(from, bucket string) string {
	return leaseRowsAlso(from, bucket, "", "")
}

// leaseRowsAlso is leaseRows with more assignments (set, starting with a
// comma) and a further condition (where, starting with AND).
func leaseRowsAlso(from, bucket, set, where string) string {
	return `
    UPDATE {schema}.messages AS m
       SET attempts = ` + nextAttempt + `,
           claim_seq = ` + nextClaimSeq + `,
           leased_by = @relay_id,
           leased_until = now() + @lease::interval` + set + `
     WHERE m.id = ANY (ARRAY(SELECT id FROM ` + from + `))` + where + `
 RETURNING m.id, ` + readTopic + `, ` + readPayload + `, ` + readKey + `,
           ` + readHeaders + `,
           ` + readIdempotencyKey + `, ` + readDestination + `,
           m.created_at, m.attempts, m.claim_seq,
           m.id = ANY (ARRAY(SELECT id FROM ` + from + ` WHERE leased_by IS NOT NULL)) AS rescued,
           CASE WHEN m.dedup
                THEN (SELECT true FROM {schema}.delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL
                ELSE false END AS duplicate,
           ` + bucket + ` AS bucket,
           ` + tooLarge + ` AS too_large`
}

// Rows are untrusted, whatever their size: a claim reads each part of a row
// only when it is within its limit (outbox/limits.go; the payload within
// @payload_max, the relay's in-flight byte budget), and names the first
// part over its limit, with its size, in too_large; the relay then
// dead-letters the row without having held the value. octet_length reads
// the size of a text or bytea value from its header, without detoasting
// it. The size of jsonb headers is not in their header: headers stored in
// at most headersSmall bytes are read as they are (even compressed, they
// cannot hold more than a few dozen KiB), larger ones are measured as JSON
// text by PostgreSQL first, and read only within outbox.HeadersBytesMax.
var (
	readTopic          = readWithin("m.topic", outbox.TopicBytesMax)
	readPayload        = `CASE WHEN octet_length(m.payload) <= @payload_max::bigint THEN m.payload END`
	readKey            = readWithin("m.key", outbox.KeyBytesMax)
	readIdempotencyKey = readWithin("m.idempotency_key", outbox.IdempotencyKeyBytesMax)
	readDestination    = readWithin("m.destination", outbox.DestinationBytesMax)
	readHeaders        = `CASE WHEN pg_column_size(m.headers) <= ` + strconv.Itoa(headersSmall) + ` THEN m.headers
                WHEN octet_length(m.headers::text) <= ` + strconv.Itoa(outbox.HeadersBytesMax) + ` THEN m.headers END`
	tooLarge = `CASE WHEN octet_length(m.payload) > @payload_max::bigint THEN 'payload ' || octet_length(m.payload)
                WHEN octet_length(m.topic) > ` + strconv.Itoa(outbox.TopicBytesMax) + ` THEN 'topic ' || octet_length(m.topic)
                WHEN octet_length(m.key) > ` + strconv.Itoa(outbox.KeyBytesMax) + ` THEN 'key ' || octet_length(m.key)
                WHEN octet_length(m.idempotency_key) > ` + strconv.Itoa(outbox.IdempotencyKeyBytesMax) + ` THEN 'idempotency_key ' || octet_length(m.idempotency_key)
                WHEN octet_length(m.destination) > ` + strconv.Itoa(outbox.DestinationBytesMax) + ` THEN 'destination ' || octet_length(m.destination)
                WHEN pg_column_size(m.headers) > ` + strconv.Itoa(headersSmall) + `
                     THEN CASE WHEN octet_length(m.headers::text) > ` + strconv.Itoa(outbox.HeadersBytesMax) + ` THEN 'headers ' || octet_length(m.headers::text) END
           END`
)

// headersSmall is the stored size (pg_column_size) up to which a claim
// reads a row's headers without measuring them as text first: ordinary
// headers (a traceparent, a content type) take far less, and measuring
// costs a conversion to text. Stored compressed, they hold at most some
// 64 KiB (LZ4 expands a byte to at most 255).
const headersSmall = 256

// readWithin returns col when it holds at most max bytes, else NULL.
func readWithin(col string, max int) string {
	return `CASE WHEN octet_length(` + col + `) <= ` + strconv.Itoa(max) + ` THEN ` + col + ` END`
}

// payloadSize is the size a claim counts against its byte budget for the
// payload of the row alias: 0 for a payload the claim will not read
// (readPayload).
func payloadSize(alias string) string {
	return `CASE WHEN octet_length(` + alias + `.payload) <= @payload_max::bigint THEN octet_length(` + alias + `.payload) ELSE 0 END`
}

// queryMessagesClaim leases up to @limit due rows, oldest first, skipping
// rows other relays hold locked or leased and rows whose sink
// (@default_sink for rows without a destination) is in @closed_sinks
// (unavailable or at capacity), and stopping before the payloads pass
// @byte_budget (withinBytes). {only} restricts the rows further (a mode
// whose keyed rows are claimed otherwise: unkeyedOnly). The update finds the
// rows by primary key from the locked set (an array, so that the planner
// cannot choose to scan and hash the whole table instead). Its rows are
// leaseRows', then a NULL (where other claims report held keys).
var queryMessagesClaim = `
WITH due AS MATERIALIZED (
    SELECT id, leased_by, available_at, ` + payloadSize("c") + ` AS size
      FROM {schema}.messages AS c
     WHERE available_at <= now()
       AND available_at >= @floor::timestamptz
       AND ` + leaseOver + `
       AND coalesce(destination, @default_sink) <> ALL (@closed_sinks::text[]){only}
     ORDER BY available_at, id
     LIMIT @limit
       FOR UPDATE SKIP LOCKED
), fits AS MATERIALIZED (` + withinBytes("due") + `
), leased AS (` + leaseRows("fits", noBucket) + `
)
SELECT *, NULL::text FROM leased`

// settleArchive moves the delivered rows and the rows skipped as
// duplicates (@archive_ids, @archive_seqs: their claim_seq,
// @archive_duplicate) to the archive and records the delivered keys that
// producers chose (dedup): the first parts of queryMessagesSettle, and the
// whole of queryMessagesArchive. {fence} is the mode's condition on every
// row a settle touches (empty: none).
const settleArchive = `archived AS (
    DELETE FROM {schema}.messages AS m
     USING unnest(@archive_ids::bigint[], @archive_seqs::int[], @archive_duplicate::bool[]) AS s(id, claim_seq, duplicate)
     WHERE m.id = ANY (@archive_ids::bigint[]) AND m.id = s.id AND m.claim_seq = s.claim_seq{fence}
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, s.duplicate, m.dedup
), archive_insert AS (
    INSERT INTO {schema}.archive (id, topic, payload, key, headers, idempotency_key, destination,
                               created_at, attempts, delivered_at, duplicate)
    SELECT id, topic, payload, key, headers, idempotency_key, destination,
           created_at, attempts, now(), duplicate
      FROM archived
), keys_insert AS (
    INSERT INTO {schema}.delivered_keys (idempotency_key, delivered_at)
    SELECT idempotency_key, now() FROM archived WHERE dedup AND NOT duplicate
)`

// queryMessagesArchive is settleArchive alone, for the settles that only
// archive (most of them): PostgreSQL plans each settle for its arrays
// (planPerExecution), and this statement plans in about a third of the
// time of the whole settle (0.3 ms against 0.8 ms). It returns the ids
// archived. {fence_cte} is the mode's CTE that {fence} reads (empty: none).
const queryMessagesArchive = `
WITH {fence_cte}` + settleArchive + `
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}')`

// queryMessagesSettle writes down the outcomes of deliveries in one
// statement (one round trip, one transaction):
//
//   - delivered rows, and rows skipped as duplicates, move to the archive,
//     and the keys of those delivered are recorded when the producer chose
//     them (settleArchive);
//   - rows to try again (@requeue_ids, @requeue_seqs) end their lease and
//     become due after @requeue_delay_us microseconds, with
//     @requeue_errors as the last error (NULL keeps the previous one);
//     @requeue_release gives the attempt back (released without a delivery
//     being tried to the end);
//   - failed rows (@dead_ids, @dead_seqs) move to the dead letters with
//     @dead_reasons and @dead_errors.
//
// It returns the ids each part touched, then the ids of dead rows whose id
// was a dead letter's already (a row inserted before ids were the
// database's alone, a sequence set back) and the ids they were
// dead-lettered under instead: such a row is dead-lettered with a new id
// from the rows' sequence, and its error says so, rather than failing the
// settle of its batch. A row is touched only while its
// claim_seq is still that of the claim that delivered it: every claim
// increments claim_seq and nothing decreases it, so a row another claim has
// taken over (after this one's lease expired) no longer matches and the late
// outcome is dropped, even when a settle is retried after a commit whose
// answer was lost. A mode adds its fence ({fence_cte}, {fence}) and what it
// moves with the rows ({after}: a CTE that reads archived, requeued and
// dead).
//
// The relay runs it with a plan made for the actual arrays (see
// planPerExecution): each part finds its rows through the primary key
// (id = ANY), and the planner knows how many there are. A generic plan, or
// a filter on a column such as leased_by whose statistics were taken while
// no row was leased, made PostgreSQL scan the whole table once per settled
// row.
const queryMessagesSettle = `
WITH {fence_cte}` + settleArchive + `, requeued AS (
    UPDATE {schema}.messages AS m
       SET leased_by = NULL,
           leased_until = NULL,
           available_at = now() + r.delay_us * interval '1 microsecond',
           last_error = coalesce(r.error, m.last_error),
           attempts = greatest(m.attempts - CASE WHEN r.release THEN 1 ELSE 0 END, 0)
      FROM unnest(@requeue_ids::bigint[], @requeue_seqs::int[], @requeue_delay_us::bigint[], @requeue_errors::text[], @requeue_release::bool[])
           AS r(id, claim_seq, delay_us, error, release)
     WHERE m.id = ANY (@requeue_ids::bigint[]) AND m.id = r.id AND m.claim_seq = r.claim_seq{fence}
 RETURNING m.id, m.key, m.available_at
), dead AS (
    DELETE FROM {schema}.messages AS m
     USING unnest(@dead_ids::bigint[], @dead_seqs::int[], @dead_reasons::text[], @dead_errors::text[]) AS d(id, claim_seq, reason, error)
     WHERE m.id = ANY (@dead_ids::bigint[]) AND m.id = d.id AND m.claim_seq = d.claim_seq{fence}
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, d.reason, d.error
){after}, dead_ids AS MATERIALIZED (
    SELECT d.*, CASE WHEN t.id IS NULL THEN d.id ELSE nextval('{schema}.messages_id_seq') END AS dead_id
      FROM dead AS d
      LEFT JOIN {schema}.dead_letters AS t ON t.id = d.id
), dead_insert AS (
    INSERT INTO {schema}.dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                    created_at, attempts, reason, error)
    SELECT dead_id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason,
           CASE WHEN dead_id = id THEN error
                ELSE error || ' [dead-lettered as ' || dead_id || ': id ' || id || ' was a dead letter''s already]' END
      FROM dead_ids
)
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}'),
       coalesce((SELECT array_agg(id) FROM requeued), '{}'),
       coalesce((SELECT array_agg(id) FROM dead), '{}'),
       coalesce((SELECT array_agg(id ORDER BY id) FROM dead_ids WHERE dead_id <> id), '{}'),
       coalesce((SELECT array_agg(dead_id ORDER BY id) FROM dead_ids WHERE dead_id <> id), '{}')`

// queryArchiveDeleteExpired deletes up to @chunk archived rows delivered
// before @cutoff; the janitor repeats it until fewer come back.
const queryArchiveDeleteExpired = `
DELETE FROM {schema}.archive
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM {schema}.archive WHERE delivered_at < @cutoff LIMIT @chunk))`

// queryDeliveredKeysDeleteExpired deletes up to @chunk delivered keys
// recorded before @cutoff.
const queryDeliveredKeysDeleteExpired = `
DELETE FROM {schema}.delivered_keys
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM {schema}.delivered_keys WHERE delivered_at < @cutoff LIMIT @chunk))`

// queryFloor reads what a refresh of the claim floor needs (floor.go), in
// one statement and so one snapshot: the transaction's start time, the
// snapshot, the id sequence's last value, a transaction id taken after both
// (the refresh's mark: the expressions are evaluated in order), whether
// the sequence hands out its values one after the other (no cache, no
// cycle), the oldest available_at at or above @start (-infinity: the
// oldest) of a row the mode's claims may take ({oldest}: the mode's
// oldestClaimable), and the oldest row at or above @start_id, through the
// primary key (oldestID).
const queryFloor = `
SELECT now(), pg_current_snapshot()::text,
       pg_sequence_last_value('{schema}.messages_id_seq'::regclass),
       pg_current_xact_id()::text,
       (SELECT s.seqcache = 1 AND NOT s.seqcycle AND s.seqincrement > 0
          FROM pg_sequence AS s
         WHERE s.seqrelid = '{schema}.messages_id_seq'::regclass),
       {oldest},
       ` + oldestID

// oldestID is the oldest row at or above @start_id, through the primary
// key: queryFloor's and queryFloorRescan's last column.
const oldestID = `(SELECT id FROM {schema}.messages
         WHERE id >= @start_id::bigint
         ORDER BY id
         LIMIT 1)`

// queryClaimPlan sets, for the rest of a claim's transaction, the planner
// settings that make a claim walk its index in order and stop at its
// limit. A bitmap scan or a sequential scan reads every due row, then
// sorts them, before it returns the first: the unordered claim of 1,000
// rows under a backlog of 100,000 took 82.7 ms that way and 5.4 ms with
// both off (EXPLAIN ANALYZE, PostgreSQL 15). The planner picks them when
// the table's statistics are older than the backlog (a hot table is
// analyzed nearly empty), which is most of the time. Off is a penalty, not
// a ban: a plan with no other way still runs. Sorts stay on: with them off
// the same claim's update took 338 ms. The statements that follow run as
// prepared statements (inPipeline: every claim, floor refreshes), parsed
// once per connection and planned for each execution's arguments and
// these settings, as planPerExecution plans a statement alone, rather
// than once for all.
// JIT is off (jitOff).
const queryClaimPlan = `
SELECT set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('plan_cache_mode', 'force_custom_plan', true),
       ` + jitOff

// jitOff turns PostgreSQL's JIT compilation off for the rest of the
// transaction. The planner compiles a statement whose estimated cost
// passes jit_above_cost (100,000 by default), at every execution: on a
// hot table whose statistics are older than its size, the estimates of
// statements that read a few hundred rows grow with the table, and under
// a pinned horizon the table only grows. Ten minutes into a pinned run an
// ordered claim was estimated at 366k to 501k, and each spent 0.4 to 6 s
// compiling for 7k buffers of work: the claims fell from 12k to 5.6k a
// minute, and commit → receipt p99 from 32 ms to 5.8 s. The binary's
// connections start with it off as well (internal/cli: openPool).
const jitOff = `set_config('jit', 'off', true)`

// oldestRow fills queryFloor's {oldest} where a claim may take any row:
// the oldest row at or above @start, through messages_due_idx.
const oldestRow = `(SELECT available_at FROM {schema}.messages
         WHERE available_at >= @start::timestamptz
         ORDER BY available_at
         LIMIT 1)`

// queryFloorRescan reads the oldest row a claim may take ({oldest}, from
// @start: -infinity) and the oldest row by id (from @start_id: the
// smallest bigint), for the floor's rescan (floor_rescan.go). It takes no
// transaction id: it is no writer other relays' floors wait for.
const queryFloorRescan = `
SELECT {oldest},
       ` + oldestID

// renderFloor renders queryFloor and queryFloorRescan for schema with a
// mode's oldestClaimable.
func renderFloor(schema, oldest string) (floor, rescan string) {
	with := map[string]string{"oldest": oldest}
	return render(queryFloor, schema, with), render(queryFloorRescan, schema, with)
}

// queryCustomPlans plans each statement of the rest of the transaction for
// its arguments: what planPerExecution does for a statement alone, for the
// statements of a pipeline (settleInPipeline), which pgx runs as prepared
// statements; JIT off (jitOff).
const queryCustomPlans = `
SELECT set_config('plan_cache_mode', 'force_custom_plan', true), ` + jitOff

// queryClaimStats reads the current transaction's statistics of the hot
// table and its indexes: the index entries its scans read, dead ones
// included, and the buffers they touched (claimsample.go).
const queryClaimStats = `
SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::bigint,
       (pg_stat_get_xact_blocks_fetched('{schema}.messages'::regclass)
        + coalesce(sum(pg_stat_get_xact_blocks_fetched(i.indexrelid)), 0))::bigint
  FROM pg_index AS i
 WHERE i.indrelid = '{schema}.messages'::regclass`

// The gauges' queries run every StatsInterval, however large the backlog:
// counts stop at gaugeCountCap rows (@cap: a gauge reading the cap means
// "at least that many"), and the oldest due row is the first the due index
// yields; both walk the due index from the claim floor (floor.go). They
// are planned per execution (planPerExecution), as every mode's gauges
// are: the generic plan a prepared statement falls back to after five runs
// took ordered mode's gauge of blocked keys to 357 ms and 22,000 buffers
// under a pinned horizon, against 0.1 ms planned for its arguments.

// queryMessagesBacklog counts the due rows per sink (@default_sink names
// the default sink), up to @cap rows.
const queryMessagesBacklog = `
SELECT coalesce(destination, @default_sink), count(*)
  FROM (SELECT destination FROM {schema}.messages
         WHERE available_at <= now() AND available_at >= @floor::timestamptz
           AND ` + leaseOver + `
         LIMIT @cap) AS due
 GROUP BY 1`

// queryTableHealth reads, in one round trip: the rows waiting for a retry
// after a failure (through messages_retry_idx, never the rows scheduled for
// later) and the dead letters (each up to @cap), how long the oldest due
// row has waited, the hot table's dead tuples (vacuum falling behind) and
// the lock requests waiting on it now (claims, producers and vacuum
// contending). @schema_name is the plain schema name.
const queryTableHealth = `
SELECT (SELECT count(*) FROM (SELECT 1 FROM {schema}.messages
                               WHERE last_error IS NOT NULL AND available_at > now()
                                 AND leased_by IS NULL AND attempts > 0
                               LIMIT @cap) AS b),
       coalesce(extract(epoch FROM now() - (
           SELECT min(available_at) FROM {schema}.messages
            WHERE available_at <= now() AND available_at >= @floor::timestamptz
              AND ` + leaseOver + `)), 0)::float8,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.dead_letters LIMIT @cap) AS d),
       coalesce((SELECT n_dead_tup FROM pg_catalog.pg_stat_user_tables
                  WHERE schemaname = @schema_name AND relname = 'messages'), 0),
       (SELECT count(*) FROM pg_catalog.pg_locks
         WHERE NOT granted AND relation = '{schema}.messages'::regclass)`

// The xmin horizon (horizon.go). VACUUM removes a dead tuple only once no
// transaction of the database may still see it: the oldest snapshot (xmin)
// or transaction id (xid) of a session of the database, of a prepared
// transaction, of a replication slot (its xmin: a standby's
// hot_standby_feedback; a logical slot's catalog_xmin holds back the system
// catalogs only, not the relay's tables) or of a standby's walsender
// without a slot holds every dead row the relay leaves behind, and its dead
// index entries stay on the claims' path.

// horizonHolders are the holder label values of the horizon gauges, in the
// order queryHorizonAge returns them.
var horizonHolders = []string{"session", "prepared", "replication"}

// horizonHolding selects the backends, prepared transactions and
// replication slots holding an xmin or an xid that the horizon of the
// current database honours, with the holder they count as, the age of
// their transaction in seconds (xact_start: NULL for a
// walsender, and for the sessions of other roles unless the reader has
// pg_read_all_stats, which PostgreSQL hides; backend_xmin and backend_xid
// it shows to everyone) and in transactions. It leaves out the reading
// backend (its own statement's snapshot) and autovacuum workers, whose
// VACUUM the horizon ignores. Backends of other databases do not hold this
// one's horizon, except walsenders (no database: a standby's
// hot_standby_feedback).
const horizonHolding = `
    SELECT CASE WHEN a.datid IS NULL OR a.backend_type = 'walsender' THEN 'replication' ELSE 'session' END AS holder,
           extract(epoch FROM now() - a.xact_start)::float8 AS age_seconds,
           greatest(age(a.backend_xmin), age(a.backend_xid))::bigint AS age_xids
      FROM pg_catalog.pg_stat_activity AS a
     WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND (a.datid IS NULL OR a.datid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()))
       AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
     UNION ALL
    SELECT 'prepared', extract(epoch FROM now() - p.prepared)::float8, age(p.transaction)::bigint
      FROM pg_catalog.pg_prepared_xacts AS p
     WHERE p.database = current_database()
     UNION ALL
    SELECT 'replication', NULL, age(s.xmin)::bigint
      FROM pg_catalog.pg_replication_slots AS s
     WHERE s.xmin IS NOT NULL`

// queryHorizonAge reads, for each holder of the database's xmin horizon
// (horizonHolders: sessions, prepared transactions, replication), how old
// its oldest is: in transactions (the age of the oldest xmin or xid; 0 when
// none), and in seconds since the transaction of that oldest one started
// (of the oldest among those whose start PostgreSQL shows; 0 when none).
// A transaction's start bounds its snapshot's age from above: a READ
// COMMITTED transaction that writes nothing takes a new snapshot for each
// statement. Every row also says whether the reading role sees the start of
// every session (it has the privileges of pg_read_all_stats).
const queryHorizonAge = `
SELECT h.holder,
       coalesce((array_agg(x.age_seconds ORDER BY x.age_xids DESC, x.age_seconds DESC)
                   FILTER (WHERE x.age_seconds IS NOT NULL))[1], 0)::float8,
       coalesce(max(x.age_xids), 0)::bigint,
       pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')
  FROM (VALUES (1, 'session'), (2, 'prepared'), (3, 'replication')) AS h(n, holder)
  LEFT JOIN (` + horizonHolding + `
       ) AS x ON x.holder = h.holder
 GROUP BY h.n, h.holder
 ORDER BY h.n`

// queryAutovacuum reads whether the server runs autovacuum and whether the
// hot table of schema @schema_name allows it (reloptions
// autovacuum_enabled).
const queryAutovacuum = `
SELECT current_setting('autovacuum')::bool,
       coalesce((SELECT option_value::bool
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,
                        pg_catalog.pg_options_to_table(c.reloptions)
                  WHERE n.nspname = @schema_name AND c.relname = 'messages' AND option_name = 'autovacuum_enabled'), true)`

// The registry of relays and the schema's mode (registry.go). The mode is
// decided under a transaction-level advisory lock (@lock_name names the
// schema), so relays starting together decide one after the other.

// A relay frozen while it registers (SIGSTOP, a VM pause) would hold the
// lock, and during a switch the table lock that holds producers back, until
// its connection died: the server ends the session after 5 seconds idle in
// the transaction.
const queryModeLock = `
SELECT set_config('idle_in_transaction_session_timeout', '5000', true), pg_advisory_xact_lock(hashtext(@lock_name))`

// queryModeRead returns the schema's recorded mode and the relays seen
// within @alive other than @relay_id whose mode is not @mode, with their
// modes.
const queryModeRead = `
SELECT (SELECT mode FROM {schema}.relay_mode),
       coalesce((SELECT array_agg(id || ' (' || mode || ')' ORDER BY id) FROM {schema}.relays
                  WHERE id <> @relay_id AND last_seen > now() - @alive::interval AND mode <> @mode), '{}')`

// queryModeSwitch records @mode as the schema's mode, switched by relay
// @relay_id.
const queryModeSwitch = `
UPDATE {schema}.relay_mode SET mode = @mode, changed_at = now(), changed_by = @relay_id`

// queryModeApply enables the insert triggers and indexes of the mode
// recorded in the transaction, and disables the others
// (messages_apply_mode in the migrations).
const queryModeApply = `
SELECT {schema}.messages_apply_mode()`

// queryModeSwitchLock keeps producers out of the messages table while the
// mode switches: it waits for every transaction that is inserting to commit
// and holds new inserts until the switch commits, so that each row is either
// seen by the switch or written after it, when the producer's triggers
// follow the new mode. It gives up after lock_timeout.
const queryModeSwitchLock = `
SET LOCAL lock_timeout = '10s'; LOCK TABLE {schema}.messages IN SHARE MODE`

// queryRelaysHeartbeat registers relay @relay_id (@version, @mode, wanting
// NOTIFY wake-ups: @notify, delivering rows without a destination to
// @default_sink and others to @sinks) or records that it is alive, and
// returns the schema's mode.
const queryRelaysHeartbeat = `
WITH seen AS (
    INSERT INTO {schema}.relays (id, version, mode, notify, default_sink, sinks)
    VALUES (@relay_id, @version, @mode, @notify, @default_sink, @sinks::text[])
    ON CONFLICT (id) DO UPDATE SET version = excluded.version, mode = excluded.mode, notify = excluded.notify,
                                   default_sink = excluded.default_sink, sinks = excluded.sinks, last_seen = now()
)
SELECT mode FROM {schema}.relay_mode`

// queryRelaysSinks returns the relays seen within @alive other than
// @relay_id that recorded their sinks: their ids, default sinks and sinks.
const queryRelaysSinks = `
SELECT id, default_sink, sinks FROM {schema}.relays
 WHERE id <> @relay_id AND last_seen > now() - @alive::interval AND default_sink IS NOT NULL
 ORDER BY id`

// queryRelaysRestart marks relay @relay_id as started now (its row may be
// left from an earlier process with the same id).
const queryRelaysRestart = `
UPDATE {schema}.relays SET started_at = now() WHERE id = @relay_id`

// queryRelaysLeave removes relay @relay_id from the registry at a clean
// shutdown.
const queryRelaysLeave = `
DELETE FROM {schema}.relays WHERE id = @relay_id`

// queryRelaysForget removes relays not seen for @gone.
const queryRelaysForget = `
DELETE FROM {schema}.relays WHERE last_seen < now() - @gone::interval`

// queries holds the statements every mode runs, rendered for one schema.
type queries struct {
	modeLock, modeRead, modeSwitch, modeSwitchLock, modeApply string
	relaysHeartbeat, relaysRestart, relaysLeave, relaysForget string
	relaysSinks                                               string
	deleteExpiredArchive, deleteExpiredKeys                   string
	backlog, tableHealth, autovacuum, horizonAge              string
	// floor and floorRescan are rendered for the relay's mode (New:
	// renderFloor with the mode's oldestClaimable).
	floor, floorRescan, claimStats, claimPlan string
}

// renderQueries renders the statements every mode runs for schema.
func renderQueries(schema string) queries {
	f := func(q string) string { return render(q, schema, nil) }
	return queries{
		modeLock:             f(queryModeLock),
		modeRead:             f(queryModeRead),
		modeSwitch:           f(queryModeSwitch),
		modeSwitchLock:       f(queryModeSwitchLock),
		modeApply:            f(queryModeApply),
		relaysHeartbeat:      f(queryRelaysHeartbeat),
		relaysRestart:        f(queryRelaysRestart),
		relaysLeave:          f(queryRelaysLeave),
		relaysForget:         f(queryRelaysForget),
		relaysSinks:          f(queryRelaysSinks),
		deleteExpiredArchive: f(queryArchiveDeleteExpired),
		deleteExpiredKeys:    f(queryDeliveredKeysDeleteExpired),
		backlog:              f(queryMessagesBacklog),
		tableHealth:          f(queryTableHealth),
		autovacuum:           f(queryAutovacuum),
		horizonAge:           f(queryHorizonAge),
		claimPlan:            f(queryClaimPlan),
		claimStats:           f(queryClaimStats),
	}
}

// settleStatements are the settle statements of a mode, rendered.
type settleStatements struct {
	// settle is queryMessagesSettle; archiveOnly is queryMessagesArchive,
	// or empty where every settle must run the whole statement.
	settle, archiveOnly string
	// then, when set, is a statement the settle runs after the settle
	// statement, in the same transaction, for the keys (@keys) of the rows
	// it deleted (ordered mode: queryHeadsPromote).
	then string
	// dropped is the warning logged when a settle finds rows no longer
	// under the claim that delivered them.
	dropped string
}

// droppedOutcomes is the usual settleStatements.dropped.
const droppedOutcomes = "rows were claimed again before this relay settled them (its lease had expired); their outcome here is dropped and they are delivered under the new claim"

// settleSlots are what a mode puts into the settle statements' slots.
type settleSlots struct {
	fenceCTE, fence, after string
}

// renderSettle renders the settle statements for schema with a mode's
// slots; withArchiveOnly keeps the shorter statement for settles that only
// archive.
func renderSettle(schema string, s settleSlots, withArchiveOnly bool) settleStatements {
	slots := map[string]string{"fence_cte": s.fenceCTE, "fence": s.fence, "after": s.after}
	st := settleStatements{settle: render(queryMessagesSettle, schema, slots), dropped: droppedOutcomes}
	if withArchiveOnly {
		st.archiveOnly = render(queryMessagesArchive, schema, slots)
	}
	return st
}

// renderClaim renders queryMessagesClaim for schema, restricted by only
// (empty: every due row).
func renderClaim(schema, only string) string {
	return render(queryMessagesClaim, schema, map[string]string{"only": only})
}
