package relay

import (
	"fmt"
	"strconv"
)

// Statements of partitioned mode (buckets.go, claim_buckets.go): the
// per-bucket claim, the fence of settles, and the leases of buckets. They
// live beside sql.go, in the same style, because they only run in this mode.

// queryBucketsClaim leases due rows of the buckets this relay owns: $8
// buckets, each with $9 the epoch under which the relay holds it. A bucket
// counts only while the buckets table still names this relay ($1) as its
// owner, with that epoch, and its lease outlives the rows' lease ($5): rows
// are leased only by the owner, and no row lease outlasts the ownership it
// was taken under (%[4]s). The walk (%[2]s) takes due rows from those
// buckets through messages_bucket_due_idx, at most $4, each bucket at most
// its share ($10); the byte budget is withinBytes'. Then, for per-key order,
// a keyed row is kept only when no older row of its key lies outside this
// claim (in flight, in backoff, not yet due, held back by the byte budget):
// a key's rows are claimed together, oldest first, and delivered one after
// the other (pipeline.go). $2, $3, $6 and $7 are those of
// queryMessagesClaim. Its rows are leaseRows', then one row per key that was
// held back, with only created_at (when its blocking row may move: the end
// of its lease, or when it is due) and the key set. The relay passes such
// keys back ($11, when there are any: %[3]s) until then or until it settles
// a row of theirs: the walk leaves their rows out, rather than lock and drop
// them again, and the claim takes each one's oldest row alone when it is
// due. That also moves a key whose oldest row sorts after its others
// (retried after them, or past the bucket's share): it goes one row per
// claim until its oldest row is settled. bucketClaim renders it.
var queryBucketsClaim = `
WITH owned AS MATERIALIZED (%[4]s
), due AS MATERIALIZED (%[2]s%[3]s
), fits AS MATERIALIZED (
    SELECT id, leased_by, key FROM (
        SELECT id, leased_by, key,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM due) AS s
     WHERE upto <= $6::bigint OR (n = 1 AND $7::bool)
), kept AS MATERIALIZED (
    SELECT f.id, f.leased_by
      FROM fits AS f
     WHERE f.key IS NULL
        OR NOT EXISTS (SELECT 1 FROM %[1]s.messages AS o
                        WHERE o.key = f.key AND o.id < f.id
                          AND o.id <> ALL (ARRAY(SELECT id FROM fits)))
), held AS (
    SELECT DISTINCT key FROM fits
     WHERE key IS NOT NULL AND id <> ALL (ARRAY(SELECT id FROM kept))
), leased AS (` + leaseRows("kept", "%[1]s.messages_bucket(m.key, m.id)") + `
)
SELECT *, NULL::text FROM leased
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT CASE WHEN o.leased_until > now() THEN least(o.leased_until, now() + $5::interval)
                    ELSE greatest(o.available_at, now()) END
          FROM %[1]s.messages AS o
         WHERE o.key = h.key AND o.id <> ALL (ARRAY(SELECT id FROM fits))
         ORDER BY o.id LIMIT 1),
       NULL, NULL, NULL, NULL, NULL, h.key
  FROM held AS h`

// bucketOwned is the owned buckets of queryBucketsClaim with the most rows
// each may give, checked pair by pair against the buckets table.
const bucketOwned = `
    SELECT b.bucket::integer AS bucket, p.max_rows
      FROM unnest($8::int[], $9::bigint[], $10::int[]) AS p(bucket, epoch, max_rows)
      JOIN %[1]s.buckets AS b ON b.bucket = p.bucket AND b.epoch = p.epoch
     WHERE b.owner = $1 AND b.lease_until > now() + $5::interval`

// bucketWalk is the walk of queryBucketsClaim: each bucket gives at most
// its share, oldest first, so that no bucket waits behind the others. One
// ordered index scan per bucket: unlike a bitmap scan over all of them at
// once, which a claim without the per-bucket order got, an index scan marks
// the entries of deleted rows dead as it passes them, so that the next
// claims skip them. %[2]s is the condition that leaves held keys out.
const bucketWalk = `
    (SELECT c.id, c.leased_by, c.available_at, c.size, c.key
      FROM owned AS o
     CROSS JOIN LATERAL (
           SELECT m.id, m.leased_by, m.available_at, octet_length(m.payload) AS size, m.key
             FROM %[1]s.messages AS m
            WHERE %[1]s.messages_bucket(m.key, m.id) = o.bucket
              AND m.available_at <= now()
              AND ` + leaseOver + `
              AND coalesce(m.destination, $2) <> ALL ($3::text[])%[2]s
            ORDER BY m.available_at, m.id
            LIMIT o.max_rows
              FOR UPDATE SKIP LOCKED) AS c
     LIMIT $4)`

// bucketHeldOut leaves the rows of held keys ($11) out of the walk.
const bucketHeldOut = `
              AND (m.key IS NULL OR m.key <> ALL ($11::text[]))`

// bucketHeldHeads adds to the walk the oldest row of each held key ($11)
// in an owned bucket, when it is due and free.
const bucketHeldHeads = `
    UNION ALL
    SELECT * FROM (
        SELECT m.id, m.leased_by, m.available_at, octet_length(m.payload) AS size, m.key
          FROM %[1]s.messages AS m
         WHERE m.id = ANY (ARRAY(
               SELECT (SELECT h.id FROM %[1]s.messages AS h WHERE h.key = k.key ORDER BY h.id LIMIT 1)
                 FROM unnest($11::text[]) AS k(key)))
           AND %[1]s.messages_bucket(m.key, m.id) = ANY (ARRAY(SELECT bucket FROM owned))
           AND m.available_at <= now()
           AND ` + leaseOver + `
           AND coalesce(m.destination, $2) <> ALL ($3::text[])
           FOR UPDATE SKIP LOCKED) AS held_heads`

// bucketClaim renders queryBucketsClaim for schema s (quoted), with the
// held keys ($11) or without them (parameters $1 to $10): most claims hold
// no key back, and the statement without that part plans faster.
func bucketClaim(s string, held bool) string {
	heldOut, heldHeads := "", ""
	if held {
		heldOut, heldHeads = bucketHeldOut, fmt.Sprintf(bucketHeldHeads, s)
	}
	return fmt.Sprintf(queryBucketsClaim, s, fmt.Sprintf(bucketWalk, s, heldOut), heldHeads, fmt.Sprintf(bucketOwned, s))
}

// bucketFence returns, for a settle statement whose next free parameter
// is $n, the CTE and the condition that restrict each of its parts to rows
// in buckets this relay still owns: $n is the relay's id, $n+1 and $n+2 the
// buckets and the epochs its outcomes were claimed under. The lease is read
// from the clock, not the transaction's start: a settle that waited on a
// lock past the end of the lease touches nothing.
func bucketFence(n int) (cte, condition string) {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	cte = `fence AS MATERIALIZED (
    SELECT b.bucket::integer AS bucket
      FROM unnest(` + p(1) + `::int[], ` + p(2) + `::bigint[]) AS f(bucket, epoch)
      JOIN %[1]s.buckets AS b ON b.bucket = f.bucket AND b.epoch = f.epoch
     WHERE b.owner = ` + p(0) + ` AND b.lease_until > clock_timestamp()
), `
	condition = `
       AND %[1]s.messages_bucket(m.key, m.id) = ANY (ARRAY(SELECT bucket FROM fence))`
	return cte, condition
}

// queryBucketsRenew extends the leases of the buckets relay $1 still holds
// (their leases have not run out) to $2 from now, and returns them with
// their epochs.
const queryBucketsRenew = `
UPDATE %[1]s.buckets SET lease_until = now() + $2::interval
 WHERE owner = $1 AND lease_until > now()
RETURNING bucket, epoch`

// queryBucketsLive returns the relays in partitioned mode seen within $1,
// by id: the replicas that share the buckets.
const queryBucketsLive = `
SELECT id FROM %[1]s.relays
 WHERE mode = 'partitioned' AND last_seen > now() - $1::interval
 ORDER BY id`

// queryBucketsAcquire gives relay $1, for $2 from now, up to $3 buckets
// that nobody holds (released, or their lease ran out), each under a new
// epoch, and returns them with their epochs.
const queryBucketsAcquire = `
UPDATE %[1]s.buckets AS b
   SET owner = $1, epoch = b.epoch + 1, lease_until = now() + $2::interval, changed_at = now()
 WHERE b.bucket = ANY (ARRAY(
       SELECT bucket FROM %[1]s.buckets
        WHERE owner IS NULL OR lease_until <= now()
        ORDER BY bucket
        LIMIT $3
          FOR UPDATE))
RETURNING b.bucket, b.epoch`

// queryBucketsRelease gives up the buckets $2 that relay $1 holds under
// the epochs $3: nobody owns them, and another relay may acquire them at
// once.
const queryBucketsRelease = `
UPDATE %[1]s.buckets AS b
   SET owner = NULL, lease_until = now(), changed_at = now()
  FROM unnest($2::int[], $3::bigint[]) AS r(bucket, epoch)
 WHERE b.bucket = r.bucket AND b.epoch = r.epoch AND b.owner = $1
RETURNING b.bucket`

// queryBucketsReset frees every bucket, when the schema leaves
// partitioned mode.
const queryBucketsReset = `UPDATE %[1]s.buckets SET owner = NULL, lease_until = '-infinity', changed_at = now() WHERE owner IS NOT NULL`

// queryBucketsLock serializes the rebalancing rounds of a schema's relays
// ($2 names the schema), in their transactions. A round is a few round
// trips: a relay frozen in the middle of one (SIGSTOP, a VM pause, a cut
// network the server has not noticed) would hold the lock, and the rows of
// the buckets it renewed, until its connection died, and every other
// relay's round would wait behind it until their leases ran out. The
// server ends such a session after $1 milliseconds idle in the transaction,
// which releases both.
const queryBucketsLock = `SELECT set_config('idle_in_transaction_session_timeout', $1::text, true),
       pg_advisory_xact_lock(hashtext($2))`
