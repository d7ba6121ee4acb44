package relay

import (
	"strconv"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// The claim statements every mode builds on: what a claim leases and
// returns, the limits it reads a row within, and the unordered claim
// (queryMessagesClaim); the heads of ordered mode are sql_heads.go, the
// buckets sql_buckets.go.

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

// leaseRunning holds for a row of alias m under a lease that still runs
// (leaseOver's opposite, for a row with a lease).
func leaseRunning(m string) string {
	return m + `.leased_until > now() AND ` + m + `.leased_until <= now() + interval '24 hours'`
}

// withinBytes selects, from the rows of the CTE from (id, leased_by,
// available_at, size), oldest first, those whose payloads add up to at most
// @byte_budget, and the first row whatever its size when @oversized is true
// (the relay holds nothing else): a claim never leases more payload bytes
// than the relay may hold, and a row larger than its share of the budget
// still goes, alone. A payload larger than the whole budget counts as
// nothing (payloadSize): the claim does not read it (readPayload).
//
// When all of from's rows fit, which is nearly always (a batch of 1,000
// rows of 256 bytes is 256 kB of a 64 MiB budget), they are taken as they
// are: the running sum, a sort and a window over the rows, runs only when
// their total is over the budget. Each branch is gated on the total, an
// InitPlan (computed once per branch, a pass over the rows each), so that
// the other is never executed: 0.8 ms of a 10.7 ms claim of 1,000 rows.
// Both forms take the same rows because size is never NULL or negative
// (payloadSize): when every row fits, every running sum does, and the
// first row with them; no rows sum to NULL, and neither branch runs.
func withinBytes(from string) string {
	return `
    SELECT id, leased_by FROM ` + from + `
     WHERE (SELECT sum(size) FROM ` + from + `) <= @byte_budget::bigint
     UNION ALL
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM ` + from + `) AS s
     WHERE (SELECT sum(size) FROM ` + from + `) > @byte_budget::bigint
       AND (upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool))`
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
    UPDATE {schema}.messages_all AS m
       SET attempts = ` + nextAttempt + `,
           claim_seq = ` + nextClaimSeq + `,
           leased_by = @relay_id,
           leased_until = now() + @lease::interval` + set + `
     WHERE m.id = ANY (ARRAY(SELECT id FROM ` + from + `))` + where + `
 RETURNING m.id, ` + readTopic + ` AS topic, ` + readPayload + ` AS payload, ` + readKey + ` AS key,
           ` + readHeaders + ` AS headers,
           ` + readIdempotencyKey + ` AS idempotency_key, ` + readDestination + ` AS destination,
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

// queryMessagesClaim leases up to @limit due rows, oldest first, from
// (@after_at, @after_id) on in the order of the walk (available_at, id):
// the claim floor and the smallest id, or just past where the relay's last
// full claim ended while a backlog drains (claimCursor). That row
// comparison starts the scan of messages_due_idx: PostgreSQL's B-tree
// takes a row comparison ahead of the plain bounds of the same column
// (available_at >= @floor) when it picks where a scan starts, and it ends
// the scan at available_at <= now(). It skips
// rows other relays hold locked or leased and rows whose sink
// (@default_sink for rows without a destination) is in @closed_sinks
// (unavailable or at capacity), and stopping before the payloads pass
// @byte_budget (withinBytes). {only} restricts the rows further (a mode
// whose keyed rows are claimed otherwise: unkeyedOnly). The update finds the
// rows by primary key from the locked set (an array, so that the planner
// cannot choose to scan and hash the whole table instead). Its rows are
// leaseRows', then the row's available_at (due_at: its place in the walk, for
// claimCursor) and a NULL held_key (where other claims report held keys).
// The update is the statement itself, not a CTE read by a final SELECT:
// its rows go to the client as it returns them instead of being copied
// into a CTE's store first (a drain's claims of 1,000 rows took 28-34 ms
// against 32-35 ms, pg_stat_statements, three runs each).
var queryMessagesClaim = `
WITH due AS MATERIALIZED (
    SELECT id, leased_by, available_at, ` + payloadSize("c") + ` AS size
      FROM {schema}.messages_all AS c
     WHERE available_at <= now()
       AND available_at >= @floor::timestamptz
       AND (available_at, id) >= (@after_at::timestamptz, @after_id::bigint)
       AND ` + leaseOver + `
       AND coalesce(destination, @default_sink) <> ALL (@closed_sinks::text[]){only}
     ORDER BY available_at, id
     LIMIT @limit
       FOR UPDATE SKIP LOCKED
), fits AS MATERIALIZED (` + withinBytes("due") + `
)` + leaseRows("fits", noBucket) + `, m.available_at AS due_at, NULL::text AS held_key`

// oldestRow is the claim floor's {oldest} where a claim may take any row
// (relay/internal/floor, Statements):
// the oldest row at or above @start, through messages_due_idx.
const oldestRow = `(SELECT available_at FROM {schema}.messages_all
         WHERE available_at >= @start::timestamptz
         ORDER BY available_at
         LIMIT 1)`

// renderClaim renders queryMessagesClaim for schema, restricted by only
// (empty: every due row).
func renderClaim(schema, only string) string {
	return render(queryMessagesClaim, schema, map[string]string{"only": only})
}
