package relay

// The statements of the lanes, through which ordered mode claims keyed
// rows (ordered.go): one lane per key with rows, whose head (oldest row)
// alone may be claimed. Slots and arguments as in sql.go.

// unkeyedOnly restricts queryMessagesClaim to rows without a key (its
// {only} slot): keyed rows are claimed through their lanes, and this
// condition lets the claim walk messages_unkeyed_due_idx, which holds no
// keyed row.
const unkeyedOnly = `
       AND c.key IS NULL`

// queryLanesClaim leases the heads of up to @limit due lanes: the oldest
// row of each key, when it is due, not leased, and its sink (@default_sink
// for rows without a destination) is not in @closed_sinks. Lanes are locked
// SKIP LOCKED, so concurrent claims take different keys and at most one
// message per key is in flight. Each lane it looked at moves out of the due
// range: to the end of the lease when its head was claimed (so that an
// expired lease makes it due again), to its head's available_at when the
// head waits (delayed, in backoff), and @recheck ahead when the head's sink
// is closed or another claim holds it leased. Not to the end of that lease:
// a claim whose snapshot was taken before the head's settle committed
// still sees the head, leased, after the settle made the lane due, and
// would park the lane, with the key's next row behind it, for up to a
// lease (30 s) although nothing holds it; the settle of a head another
// claim holds moves its lane anyway. A lane whose head did not fit in the
// @byte_budget this claim may take (withinBytes) stays due, in its place,
// for the claim after the next settle. Its rows are those of queryMessagesClaim, then one row per lane
// that has no head left, with only the last column, that lane's key, set:
// the caller prunes them (queryLanesPrune). The cost follows the lanes
// claimed, not the rows queued behind heads in flight.
var queryLanesClaim = `
WITH due_lanes AS MATERIALIZED (
    SELECT l.key
      FROM {schema}.lanes AS l
     WHERE l.available_at <= now()
     ORDER BY l.available_at
     LIMIT @limit
       FOR NO KEY UPDATE SKIP LOCKED
), heads AS MATERIALIZED (
    SELECT d.key, h.id, h.available_at, h.leased_until,
           coalesce(h.destination, @default_sink) <> ALL (@closed_sinks::text[]) AS open
      FROM due_lanes AS d
      LEFT JOIN LATERAL (
           SELECT m.id, m.available_at, m.leased_until, m.destination
             FROM {schema}.messages AS m
            WHERE ` + ofKey("m", "d.key") + `
            ORDER BY m.key, m.id
            LIMIT 1
      ) AS h ON true
), locked AS MATERIALIZED (
    SELECT m.id, m.leased_by, m.available_at, octet_length(m.payload) AS size
      FROM {schema}.messages AS m
     WHERE m.id = ANY (ARRAY(
           SELECT id FROM heads
            WHERE id IS NOT NULL AND open AND available_at <= now()
              AND ` + leaseOver + `))
       FOR UPDATE SKIP LOCKED
), claimable AS MATERIALIZED (` + withinBytes("locked") + `
), leased AS (` + leaseRows("claimable", noBucket) + `
), moved AS (
    UPDATE {schema}.lanes AS l
       SET available_at = CASE
               WHEN h.id = ANY (ARRAY(SELECT id FROM claimable)) THEN now() + @lease::interval
               WHEN h.id = ANY (ARRAY(SELECT id FROM locked)) THEN l.available_at
               WHEN h.available_at > now() THEN h.available_at
               WHEN h.leased_until > now() THEN least(h.leased_until, now() + @recheck::interval)
               ELSE now() + @recheck::interval
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

// queryLanesPrune deletes the lanes of @keys whose keys have no rows left
// and makes the others due again (see lanes_prune in the migrations: it
// locks the lanes before it looks for rows).
const queryLanesPrune = `
SELECT {schema}.lanes_prune(@keys::text[])`

// queryLanesRepair opens a lane for every key that has rows but no lane,
// and returns those keys. Producers open lanes themselves (the
// messages_open_lanes trigger) and a switch to ordered mode opens them for
// the rows already there (queryLanesBackfill, with producers held out), so
// none is expected: this is a safety net. It walks the distinct keys, not
// the rows, with one index probe per key.
const queryLanesRepair = `
WITH RECURSIVE keys AS (
    (SELECT key FROM {schema}.messages WHERE key IS NOT NULL ORDER BY key LIMIT 1)
    UNION ALL
    SELECT (SELECT m.key FROM {schema}.messages AS m WHERE m.key > k.key ORDER BY m.key LIMIT 1)
      FROM keys AS k
     WHERE k.key IS NOT NULL
)
INSERT INTO {schema}.lanes (key)
SELECT key FROM keys
 WHERE key IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM {schema}.lanes AS l WHERE l.key = keys.key)
ON CONFLICT (key) DO NOTHING
RETURNING key`

// queryLanesBackfill opens a lane for every key with rows, when the schema
// switches to ordered mode.
const queryLanesBackfill = `
INSERT INTO {schema}.lanes (key)
SELECT DISTINCT key FROM {schema}.messages WHERE key IS NOT NULL
ON CONFLICT (key) DO NOTHING`

// queryLanesClear drops every lane, when the schema leaves ordered mode.
const queryLanesClear = `
DELETE FROM {schema}.lanes`

// settleLanes fills the {after} slot of queryMessagesSettle: it moves the
// lanes of the settled heads, due now when the head left the table (the
// next row of the key is then its head), to the head's new available_at
// when it was requeued. It is one write per key, however many rows wait
// behind the head.
const settleLanes = `, lanes_moved AS (
    UPDATE {schema}.lanes AS l
       SET available_at = u.available_at
      FROM (SELECT key, now() AS available_at FROM archived WHERE key IS NOT NULL
            UNION ALL
            SELECT key, available_at FROM requeued WHERE key IS NOT NULL
            UNION ALL
            SELECT key, now() FROM dead WHERE key IS NOT NULL) AS u
     WHERE l.key = u.key
)`

// queryLanesBacklog counts the rows due per sink (@default_sink names the
// default sink): rows without a key that are due, and the heads of due
// lanes that are due; rows waiting behind their key's head are not due.
// Each part stops at @cap rows. It also returns the oldest due time of each
// sink.
var queryLanesBacklog = `
WITH unkeyed AS (
    SELECT destination, available_at FROM {schema}.messages
     WHERE key IS NULL AND available_at <= now() AND ` + leaseOver + `
     ORDER BY available_at
     LIMIT @cap
), heads AS (
    SELECT h.destination, h.available_at
      FROM (SELECT key FROM {schema}.lanes WHERE available_at <= now() LIMIT @cap) AS l,
           LATERAL (SELECT m.destination, m.available_at, m.leased_until FROM {schema}.messages AS m
                     WHERE ` + ofKey("m", "l.key") + ` ORDER BY m.key, m.id LIMIT 1) AS h
     WHERE h.available_at <= now() AND (h.leased_until IS NULL OR h.leased_until <= now())
)
SELECT coalesce(destination, @default_sink), count(*), min(available_at)
  FROM (SELECT * FROM unkeyed UNION ALL SELECT * FROM heads) AS due
 GROUP BY 1`

// queryLanesBlocked returns the keys whose head failed and waits for its
// retry (looking at up to @lanes_cap lanes not due now) and the rows that
// wait behind their key's head (keyed rows less lanes, each count stopping
// at @cap).
var queryLanesBlocked = `
SELECT (SELECT count(*)
          FROM (SELECT key FROM {schema}.lanes WHERE available_at > now() LIMIT @lanes_cap) AS l,
               LATERAL (SELECT m.attempts, m.leased_by, m.available_at FROM {schema}.messages AS m
                         WHERE ` + ofKey("m", "l.key") + ` ORDER BY m.key, m.id LIMIT 1) AS h
         WHERE h.attempts > 0 AND h.leased_by IS NULL AND h.available_at > now()),
       greatest((SELECT count(*) FROM (SELECT 1 FROM {schema}.messages WHERE key IS NOT NULL LIMIT @cap) AS k)
              - (SELECT count(*) FROM (SELECT 1 FROM {schema}.lanes LIMIT @cap) AS l), 0)`
