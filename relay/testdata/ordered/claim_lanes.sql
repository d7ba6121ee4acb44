WITH due_lanes AS MATERIALIZED (
    SELECT l.key
      FROM "outbox".lanes AS l
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
             FROM "outbox".messages AS m
            WHERE m.key IS NOT NULL AND (m.key, m.id) >= (d.key, (CASE WHEN EXISTS (SELECT 1 FROM unnest(@passed_writers::text[]::xid8[]) AS w
                                     WHERE pg_visible_in_snapshot(w, pg_current_snapshot()))
                  THEN -9223372036854775808 ELSE @id_floor::bigint END)) AND (m.key, m.id) <= (d.key, 9223372036854775807)
            ORDER BY m.key, m.id
            LIMIT 1
      ) AS h ON true
), locked AS MATERIALIZED (
    SELECT m.id, m.leased_by, m.available_at, octet_length(m.payload) AS size
      FROM "outbox".messages AS m
     WHERE m.id = ANY (ARRAY(
           SELECT id FROM heads
            WHERE id IS NOT NULL AND open AND available_at <= now()
              AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '1 day')))
       FOR UPDATE SKIP LOCKED
), claimable AS MATERIALIZED (
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM locked) AS s
     WHERE upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool)
), leased AS (
    UPDATE "outbox".messages AS m
       SET attempts = least(greatest(m.attempts, 0), 1000000) + 1,
           claim_seq = CASE WHEN m.claim_seq >= 2147483646 OR m.claim_seq < 0 THEN 1 ELSE m.claim_seq + 1 END,
           leased_by = @relay_id,
           leased_until = now() + @lease::interval
     WHERE m.id = ANY (ARRAY(SELECT id FROM claimable))
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, m.claim_seq,
           m.id = ANY (ARRAY(SELECT id FROM claimable WHERE leased_by IS NOT NULL)) AS rescued,
           CASE WHEN m.dedup
                THEN (SELECT true FROM "outbox".delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL
                ELSE false END AS duplicate,
           0 AS bucket
), moved AS (
    UPDATE "outbox".lanes AS l
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
 WHERE id IS NULL
