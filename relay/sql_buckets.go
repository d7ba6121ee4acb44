package relay

import "github.com/outbox-relay/outbox-relay/relay/internal/floor"

// The statements that claim and settle by bucket (partitioned.go; the
// buckets' leases are relay/internal/buckets'): the per-bucket claim and
// the fence of settles. Slots and arguments as in sql.go.

// queryBucketsClaim leases due rows of the buckets this relay owns:
// @buckets, each with @epochs the epoch under which the relay holds it. A
// bucket counts only while the buckets table still names this relay
// (@relay_id) as its owner, with that epoch, and its lease outlives the
// rows' lease (@lease): rows are leased only by the owner, and no row lease
// outlasts the ownership it was taken under (bucketOwned). The walk
// (bucketWalk) takes due rows from those buckets through
// messages_bucket_due_idx, at most @limit, each bucket at most its share
// (@shares); the byte budget is withinBytes'. Then, for per-key order, a
// keyed row is kept only when the rows of its key before it are in the
// claim or in flight in this relay (@relay_id), and none between it and the
// key's first row in the claim lies outside the claim. Per key in the claim
// (outside, which also carries each key's rows in the claim, so that
// keeping them and holding keys back take one pass over the claim's keys),
// two probes of messages_key_idx start at the key's first row in the claim
// (ids[1]): backwards, the live row just before it (p, down to the id
// floor; run only when the key's first live row from the id floor up lies
// before ids[1], a forward lookup that stops there, or when the key has
// rows in flight in this relay: @keys_in_flight, below), and forwards, unless
// p holds the key back, the key's first row after it that is not in the
// claim (oldest): the key's rows in the claim before that one are kept.
// A key with one row in the claim needs no forward probe (no row of the
// claim lies after it): with 5,000 keys interleaved, most keys of most
// claims. When p is a row this relay holds under a lease
// that still runs, it is after: the key's rows in the claim are delivered
// once its delivery passed, which passes only once the key's rows before
// it passed (relay/internal/keychain, keyorder.go). Any other p (in flight
// in another relay, backing off, not yet due) holds the key back. A row of
// this relay's after ids[1] is one it is releasing, and cuts the kept rows
// as any row outside the claim. Before, a claim looked forwards from the id
// floor for the key's oldest row outside the claim, and met the key's rows
// in flight here and the entries its delivered rows left below them: in a
// 200k burst over 5,000 keys, 86 µs a key, and as much again to look past
// the rows in flight, where the backward probe takes 9 µs; and before
// that it dropped a key's rows while the key's previous row was in flight
// here, about half of what each claim locked. The backward probe alone,
// when the key had no live row below ids[1] (most keys, most claims), did
// not stop at the id floor: PostgreSQL (15 at least) ends a scan on a row
// comparison only where its first column decides, so the scan went on
// through every entry of the key below the floor, down to the first of its
// generation: the dead entries a pinned horizon keeps (1.2 ms a key after
// ten minutes of a pin at 1,000 rows/s, and 0.16 ms unpinned, where
// vacuum lags). The forward lookup starts at the floor and stops at the
// key's first live row. It only spares the backward probe that walk, and
// says nothing the probe does not: the probe's own bounds are the lookup's,
// so when the lookup finds nothing the probe finds nothing either. A key
// the relay holds rows of (the keys of its chains, @keys_in_flight, a JSON
// object whose names are the keys: ? looks a name up by binary search) most
// often has a live row below ids[1], its row in flight, where the backward
// probe stops, so its lookup is skipped. In a 200k burst over 5,000 keys
// three keys in four of a claim have one; a claim of 1,000 rows over 1,000
// such keys took 23.0-24.2 ms against 26.6-29.1 ms (make
// bench-partitioned-claim; 4,000 buffers fewer), reading the object (1,265
// keys) about 0.3 ms of it. A key named wrongly costs only time, a probe
// that walks its entries below the floor: one whose rows here were settled
// between the relay's reading of its chains and the claim's snapshot (a
// settle commits before its links say so), or whose rows here lie above
// ids[1].
// @default_sink and @closed_sinks are those of queryMessagesClaim. Its
// rows are leaseRows' with after (set on the first row of a key kept
// behind a row of this relay's), then one row per key that
// was held back, with only created_at (when its blocking row may move: the
// end of its lease, or when it is due) and the key set. The relay passes
// such keys back (@held_keys, when there are any: {held_out} and
// {held_heads}) until then or until it settles a row of theirs: the walk
// leaves their rows out, rather than lock and drop them again, and the
// claim takes each one's oldest row alone when it is due. That also moves
// a key whose oldest row sorts after its others (retried after them, or
// past the bucket's share): it goes one row per claim until its oldest row
// is settled.
var queryBucketsClaim = `
WITH mine AS MATERIALIZED (` + bucketMine + `
), owned AS MATERIALIZED (` + bucketOwned + `
), due AS MATERIALIZED (` + bucketWalk + `{held_heads}
), fits AS MATERIALIZED (
    SELECT id, leased_by, key FROM (
        SELECT id, leased_by, key,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM due) AS s
     WHERE upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool)
), outside AS MATERIALIZED (
    SELECT k.key, k.ids, k.leased, k.newest,
           CASE WHEN k.newest = k.ids[1] AND (p.id IS NULL OR p.ours) THEN NULL
                WHEN p.id IS NULL OR p.ours
                THEN (SELECT o.id FROM {schema}.messages_all AS o
                       WHERE o.key IS NOT NULL AND (o.key, o.id) > (k.key, k.ids[1]) AND (o.key, o.id) <= (k.key, 9223372036854775807)
                         AND o.id <> ALL (k.ids)
                       ORDER BY o.key, o.id LIMIT 1)
                ELSE p.id END AS oldest,
           CASE WHEN p.ours THEN p.id END AS after
      FROM (SELECT key, array_agg(id ORDER BY id) AS ids, array_agg(leased_by ORDER BY id) AS leased, max(id) AS newest
              FROM fits WHERE key IS NOT NULL GROUP BY key) AS k
      LEFT JOIN LATERAL (
           SELECT o.id, (o.leased_by = @relay_id AND ` + leaseRunning("o") + `) IS TRUE AS ours
             FROM {schema}.messages_all AS o
            WHERE (@keys_in_flight::jsonb ? k.key
                   OR (SELECT f.id FROM {schema}.messages_all AS f
                        WHERE ` + ofKey("f", "k.key") + `
                        ORDER BY f.key, f.id LIMIT 1) < k.ids[1])
              AND o.key IS NOT NULL AND (o.key, o.id) < (k.key, k.ids[1]) AND (o.key, o.id) >= (k.key, ` + floor.IDFloor + `)
            ORDER BY o.key DESC, o.id DESC LIMIT 1) AS p ON true
), kept AS MATERIALIZED (
    SELECT f.id, f.leased_by FROM fits AS f WHERE f.key IS NULL
     UNION ALL
    SELECT r.id, r.leased_by
      FROM outside AS x
     CROSS JOIN LATERAL unnest(x.ids, x.leased) AS r(id, leased_by)
     WHERE x.oldest IS NULL OR r.id < x.oldest
), held AS (
    SELECT x.key, x.oldest FROM outside AS x
     WHERE x.oldest < x.newest
), leased AS (` + leaseRows("kept", "{schema}.messages_bucket(m.key, m.id)") + `
)
SELECT l.*, NULL::text AS held_key, x.after
  FROM leased AS l
  LEFT JOIN outside AS x ON x.after IS NOT NULL AND l.id = x.ids[1]
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT CASE WHEN o.leased_until > now() THEN least(o.leased_until, now() + @lease::interval)
                    ELSE greatest(o.available_at, now()) END
          FROM {schema}.messages_all AS o
         WHERE o.id = h.oldest),
       NULL, NULL, NULL, NULL, NULL, NULL, h.key, NULL
  FROM held AS h`

// ofKey is the condition that m is a row of key (an expression of an outer
// row), for the lookups that take a key's oldest rows in the order of
// messages_key_idx (ORDER BY key, id LIMIT 1), from the id floor
// (@id_floor, relay/internal/floor) up. It bounds the key in row comparisons, not as
// m.key = key: with the key equal to one value, PostgreSQL drops it from
// the order, and the primary key then gives "id order" too, which it took,
// walking the ids of every key (800 rows read per lookup with 10 keys, and
// every dead row under a pinned horizon). The row comparisons keep the key
// in the order, which only messages_key_idx gives, and start its scan at
// the key's first id that may be pending: below the id floor lie only the
// dead entries of the key's delivered rows, which a pinned horizon keeps
// (each lookup walked all of them). Read forwards (ORDER BY key, id) the
// scan starts at the floor; read backwards it does not stop there (a row
// comparison ends a scan only where its first column decides), so a
// backward lookup needs a forward one to tell it a row is there
// (queryBucketsClaim's p). status's blocked keys (relay/admin)
// state the same from the smallest bigint.
func ofKey(m, key string) string {
	return m + `.key IS NOT NULL AND (` + m + `.key, ` + m + `.id) >= (` + key + `, ` + floor.IDFloor + `) AND (` + m + `.key, ` + m + `.id) <= (` + key + `, 9223372036854775807)`
}

// bucketMine is the buckets the buckets table names this relay the owner
// of, with their epochs, while their lease outlives the rows' lease: read
// in one scan of the table, the claim's first step. The table is tiny (64
// rows) but every lease renewal updates its rows, so a pinned horizon
// leaves dead versions of each: looked up by bucket, through its primary
// key, each of the 64 lookups walked all of its bucket's (2,579 buffers
// after 80 renewals under a pin, against 39 for the scan, which reads each
// page once).
const bucketMine = `
    SELECT b.bucket::integer AS bucket, b.epoch
      FROM {schema}.buckets AS b
     WHERE b.owner = @relay_id AND b.lease_until > now() + @lease::interval`

// bucketOwned is the owned buckets of queryBucketsClaim with the most rows
// each may give: the pairs the relay passes (@buckets, @epochs) that the
// table still holds (mine).
const bucketOwned = `
    SELECT p.bucket, p.max_rows
      FROM unnest(@buckets::int[], @epochs::bigint[], @shares::int[]) AS p(bucket, epoch, max_rows)
      JOIN mine AS b ON b.bucket = p.bucket AND b.epoch = p.epoch`

// bucketWalk is the walk of queryBucketsClaim: each bucket gives at most
// its share, oldest first, so that no bucket waits behind the others. One
// ordered index scan per bucket: unlike a bitmap scan over all of them at
// once, which a claim without the per-bucket order got, an index scan marks
// the entries of deleted rows dead as it passes them, so that the next
// claims skip them. {held_out} leaves held keys out.
//
// The walk orders by the bucket first, though its rows all lie in one: that
// is the index's order, which the scan then gives as it is and stops after
// the bucket's share. Ordered by (available_at, id) alone, the scan's order
// did not match (the row comparisons do not fix the bucket to a constant,
// so PostgreSQL cannot drop it from the index's order): every claim read
// the whole bucket in a bitmap scan and sorted it to take its share: in a
// 200k burst over four relays, 2,900 rows per bucket read to keep 48, 31k
// buffers and 276 ms per claim. The walk alone over 16 buckets of a 200k
// burst: 51k buffers and 106 ms sorted, 2k buffers and 2 ms in the
// index's order.
//
// Only messages_bucket_due_idx can serve it (migration 11): the walk alone
// states that index's predicate (the bucket BETWEEN 0 AND 63), and it
// bounds available_at only inside row comparisons led by the bucket, which
// do not imply messages_due_idx's predicate. The two row comparisons alone
// hold the row to its bucket: with the bucket also stated equal to the
// owned one, PostgreSQL starts the scan at the bucket's first entry (an
// equality wins the scan's start over a row comparison on the same column)
// and reads every entry of the bucket up to the floor, under a pinned
// horizon every dead one: 44 index pages per bucket, 2,800 per claim, after
// four minutes of a pin at 1000 rows/s, against 3 from the floor. Were the shared due index a
// candidate, stale statistics would have it walked once per bucket with the
// bucket as a filter: 64 times the due range and, under a pinned horizon,
// its dead entries.
//
// The walk's one condition strict in a column, octet_length(m.payload) >= 0,
// is true of every row (payload is NOT NULL): it lets the planner leave
// messages_all itself, which holds no row, out of the walk (migration 26),
// as the other claims' conditions on id, key or available_at do. A
// strict condition on available_at, id or key would imply the predicates of
// indexes the walk must not use.
var bucketWalk = `
    (SELECT c.id, c.leased_by, c.available_at, c.size, c.key
      FROM owned AS o
     CROSS JOIN LATERAL (
           SELECT m.id, m.leased_by, m.available_at, ` + payloadSize("m") + ` AS size, m.key
             FROM {schema}.messages_all AS m
            WHERE {schema}.messages_bucket(m.key, m.id) BETWEEN 0 AND 63
              AND octet_length(m.payload) >= 0
              AND ({schema}.messages_bucket(m.key, m.id), m.available_at) <= (o.bucket, now())
              AND ({schema}.messages_bucket(m.key, m.id), m.available_at) >= (o.bucket, @floor::timestamptz)
              AND ` + leaseOver + `
              AND coalesce(m.destination, @default_sink) <> ALL (@closed_sinks::text[]){held_out}
            ORDER BY {schema}.messages_bucket(m.key, m.id), m.available_at, m.id
            LIMIT o.max_rows
              FOR UPDATE SKIP LOCKED) AS c
     LIMIT @limit)`

// bucketHeldOut fills {held_out}: it leaves the rows of held keys
// (@held_keys) out of the walk.
const bucketHeldOut = `
              AND (m.key IS NULL OR m.key <> ALL (@held_keys::text[]))`

// bucketHeldHeads fills {held_heads}: it adds to the walk the oldest row
// of each held key (@held_keys) in an owned bucket, when it is due and
// free. The heads are found by id; whether they are due is asked inside a
// row comparison, which leaves messages_due_idx no candidate for it.
var bucketHeldHeads = `
    UNION ALL
    SELECT * FROM (
        SELECT m.id, m.leased_by, m.available_at, ` + payloadSize("m") + ` AS size, m.key
          FROM {schema}.messages_all AS m
         WHERE m.id = ANY (ARRAY(
               SELECT (SELECT h.id FROM {schema}.messages_all AS h WHERE ` + ofKey("h", "k.key") + ` ORDER BY h.key, h.id LIMIT 1)
                 FROM unnest(@held_keys::text[]) AS k(key)))
           AND {schema}.messages_bucket(m.key, m.id) = ANY (ARRAY(SELECT bucket FROM owned))
           AND (m.id, m.available_at) <= (m.id, now())
           AND ` + leaseOver + `
           AND coalesce(m.destination, @default_sink) <> ALL (@closed_sinks::text[])
           FOR UPDATE SKIP LOCKED) AS held_heads`

// renderBucketsClaim renders queryBucketsClaim for schema, with the held
// keys (@held_keys) or without them: most claims hold no key back, and the
// statement without that part plans faster.
func renderBucketsClaim(schema string, held bool) string {
	slots := map[string]string{"held_out": "", "held_heads": ""}
	if held {
		slots = map[string]string{"held_out": bucketHeldOut, "held_heads": bucketHeldHeads}
	}
	return render(queryBucketsClaim, schema, slots)
}

// bucketFenceCTE and bucketFence fill the {fence_cte} and {fence} slots
// of the settle statements: each part touches only rows in buckets this
// relay (@relay_id) still owns under the epochs its outcomes were claimed
// under (@fence_buckets, @fence_epochs). The lease is read from the clock,
// not the transaction's start: a settle that waited on a lock past the end
// of the lease touches nothing. The buckets table is read in one scan
// (fence_mine), as the claim reads it (bucketMine says why).
const (
	bucketFenceCTE = `fence_mine AS MATERIALIZED (
    SELECT b.bucket::integer AS bucket, b.epoch
      FROM {schema}.buckets AS b
     WHERE b.owner = @relay_id AND b.lease_until > clock_timestamp()
), fence AS MATERIALIZED (
    SELECT f.bucket
      FROM unnest(@fence_buckets::int[], @fence_epochs::bigint[]) AS f(bucket, epoch)
      JOIN fence_mine AS b ON b.bucket = f.bucket AND b.epoch = f.epoch
), `
	bucketFence = `
       AND {schema}.messages_bucket(m.key, m.id) = ANY (ARRAY(SELECT bucket FROM fence))`
)
