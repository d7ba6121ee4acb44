WITH mine AS MATERIALIZED (
    SELECT b.bucket::integer AS bucket, b.epoch
      FROM "outbox".buckets AS b
     WHERE b.owner = @relay_id AND b.lease_until > now() + @lease::interval
), owned AS MATERIALIZED (
    SELECT p.bucket, p.max_rows
      FROM unnest(@buckets::int[], @epochs::bigint[], @shares::int[]) AS p(bucket, epoch, max_rows)
      JOIN mine AS b ON b.bucket = p.bucket AND b.epoch = p.epoch
), due AS MATERIALIZED (
    (SELECT c.id, c.leased_by, c.available_at, c.size, c.key
      FROM owned AS o
     CROSS JOIN LATERAL (
           SELECT m.id, m.leased_by, m.available_at, CASE WHEN octet_length(m.payload) <= @payload_max::bigint THEN octet_length(m.payload) ELSE 0 END AS size, m.key
             FROM "outbox".messages_all AS m
            WHERE "outbox".messages_bucket(m.key, m.id) BETWEEN 0 AND 63
              AND octet_length(m.payload) >= 0
              AND ("outbox".messages_bucket(m.key, m.id), m.available_at) <= (o.bucket, now())
              AND ("outbox".messages_bucket(m.key, m.id), m.available_at) >= (o.bucket, @floor::timestamptz)
              AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
              AND coalesce(m.destination, @default_sink) <> ALL (@closed_sinks::text[])
              AND (m.key IS NULL OR m.key <> ALL (@held_keys::text[]))
            ORDER BY "outbox".messages_bucket(m.key, m.id), m.available_at, m.id
            LIMIT o.max_rows
              FOR UPDATE SKIP LOCKED) AS c
     LIMIT @limit)
    UNION ALL
    SELECT * FROM (
        SELECT m.id, m.leased_by, m.available_at, CASE WHEN octet_length(m.payload) <= @payload_max::bigint THEN octet_length(m.payload) ELSE 0 END AS size, m.key
          FROM "outbox".messages_all AS m
         WHERE m.id = ANY (ARRAY(
               SELECT (SELECT h.id FROM "outbox".messages_all AS h WHERE h.key IS NOT NULL AND (h.key, h.id) >= (k.key, (SELECT least(min(w.id), @id_floor::bigint)
                    FROM unnest(@passed_writers::text[]::xid8[], @passed_ids::bigint[]) AS w(x, id)
                   WHERE pg_visible_in_snapshot(w.x, pg_current_snapshot()))) AND (h.key, h.id) <= (k.key, 9223372036854775807) ORDER BY h.key, h.id LIMIT 1)
                 FROM unnest(@held_keys::text[]) AS k(key)))
           AND "outbox".messages_bucket(m.key, m.id) = ANY (ARRAY(SELECT bucket FROM owned))
           AND (m.id, m.available_at) <= (m.id, now())
           AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
           AND coalesce(m.destination, @default_sink) <> ALL (@closed_sinks::text[])
           FOR UPDATE SKIP LOCKED) AS held_heads
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
                THEN (SELECT o.id FROM "outbox".messages_all AS o
                       WHERE o.key IS NOT NULL AND (o.key, o.id) > (k.key, k.ids[1]) AND (o.key, o.id) <= (k.key, 9223372036854775807)
                         AND o.id <> ALL (k.ids)
                       ORDER BY o.key, o.id LIMIT 1)
                ELSE p.id END AS oldest,
           CASE WHEN p.ours THEN p.id END AS after
      FROM (SELECT key, array_agg(id ORDER BY id) AS ids, array_agg(leased_by ORDER BY id) AS leased, max(id) AS newest
              FROM fits WHERE key IS NOT NULL GROUP BY key) AS k
      LEFT JOIN LATERAL (
           SELECT o.id, (o.leased_by = @relay_id AND o.leased_until > now() AND o.leased_until <= now() + interval '24 hours') IS TRUE AS ours
             FROM "outbox".messages_all AS o
            WHERE (@keys_in_flight::jsonb ? k.key
                   OR (SELECT f.id FROM "outbox".messages_all AS f
                        WHERE f.key IS NOT NULL AND (f.key, f.id) >= (k.key, (SELECT least(min(w.id), @id_floor::bigint)
                    FROM unnest(@passed_writers::text[]::xid8[], @passed_ids::bigint[]) AS w(x, id)
                   WHERE pg_visible_in_snapshot(w.x, pg_current_snapshot()))) AND (f.key, f.id) <= (k.key, 9223372036854775807)
                        ORDER BY f.key, f.id LIMIT 1) < k.ids[1])
              AND o.key IS NOT NULL AND (o.key, o.id) < (k.key, k.ids[1]) AND (o.key, o.id) >= (k.key, (SELECT least(min(w.id), @id_floor::bigint)
                    FROM unnest(@passed_writers::text[]::xid8[], @passed_ids::bigint[]) AS w(x, id)
                   WHERE pg_visible_in_snapshot(w.x, pg_current_snapshot())))
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
), leased AS (
    UPDATE "outbox".messages_all AS m
       SET attempts = least(greatest(m.attempts, 0), 1000000) + 1,
           claim_seq = CASE WHEN m.claim_seq >= 2147483646 OR m.claim_seq < 0 THEN 1 ELSE m.claim_seq + 1 END,
           leased_by = @relay_id,
           leased_until = now() + @lease::interval
     WHERE m.id = ANY (ARRAY(SELECT id FROM kept))
 RETURNING m.id, CASE WHEN octet_length(m.topic) <= 255 THEN m.topic END AS topic, CASE WHEN octet_length(m.payload) <= @payload_max::bigint THEN m.payload END AS payload, CASE WHEN octet_length(m.key) <= 4000 THEN m.key END AS key,
           CASE WHEN pg_column_size(m.headers) <= 256 THEN m.headers
                WHEN octet_length(m.headers::text) <= 16384 THEN m.headers END AS headers,
           CASE WHEN octet_length(m.idempotency_key) <= 800 THEN m.idempotency_key END AS idempotency_key, CASE WHEN octet_length(m.destination) <= 255 THEN m.destination END AS destination,
           m.created_at, m.attempts, m.claim_seq,
           m.id = ANY (ARRAY(SELECT id FROM kept WHERE leased_by IS NOT NULL)) AS rescued,
           CASE WHEN m.dedup
                THEN (SELECT true FROM "outbox".delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL
                ELSE false END AS duplicate,
           "outbox".messages_bucket(m.key, m.id) AS bucket,
           CASE WHEN octet_length(m.payload) > @payload_max::bigint THEN 'payload ' || octet_length(m.payload)
                WHEN octet_length(m.topic) > 255 THEN 'topic ' || octet_length(m.topic)
                WHEN octet_length(m.key) > 4000 THEN 'key ' || octet_length(m.key)
                WHEN octet_length(m.idempotency_key) > 800 THEN 'idempotency_key ' || octet_length(m.idempotency_key)
                WHEN octet_length(m.destination) > 255 THEN 'destination ' || octet_length(m.destination)
                WHEN pg_column_size(m.headers) > 256
                     THEN CASE WHEN octet_length(m.headers::text) > 16384 THEN 'headers ' || octet_length(m.headers::text) END
           END AS too_large
)
SELECT l.*, NULL::text AS held_key, x.after
  FROM leased AS l
  LEFT JOIN outside AS x ON x.after IS NOT NULL AND l.id = x.ids[1]
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT CASE WHEN o.leased_until > now() THEN least(o.leased_until, now() + @lease::interval)
                    ELSE greatest(o.available_at, now()) END
          FROM "outbox".messages_all AS o
         WHERE o.id = h.oldest),
       NULL, NULL, NULL, NULL, NULL, NULL, h.key, NULL
  FROM held AS h
