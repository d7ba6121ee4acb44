WITH patience AS MATERIALIZED (
    SELECT set_config('lock_timeout', @lock_wait, true) AS lock_timeout
), due AS MATERIALIZED (
    SELECT c.id, c.leased_by, c.available_at, octet_length(c.payload) AS size, c.key
      FROM "outbox".messages AS c
     WHERE (SELECT lock_timeout FROM patience) IS NOT NULL
       AND c.key IS NOT NULL AND NOT c.waiting
       AND c.available_at <= now()
       AND c.available_at >= @floor::timestamptz
       AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '1 day')
       AND coalesce(c.destination, @default_sink) <> ALL (@closed_sinks::text[])
     ORDER BY c.available_at, c.id
     LIMIT @limit
       FOR NO KEY UPDATE SKIP LOCKED
), oldest AS MATERIALIZED (
    SELECT k.key,
           (SELECT o.id FROM "outbox".messages AS o
             WHERE o.key IS NOT NULL AND (o.key, o.id) >= (k.key, (CASE WHEN EXISTS (SELECT 1 FROM unnest(@passed_writers::text[]::xid8[]) AS w
                                     WHERE pg_visible_in_snapshot(w, pg_current_snapshot()))
                  THEN -9223372036854775808 ELSE @id_floor::bigint END)) AND (o.key, o.id) <= (k.key, 9223372036854775807)
             ORDER BY o.key, o.id LIMIT 1) AS id
      FROM (SELECT DISTINCT key FROM due) AS k
), blockers AS MATERIALIZED (
    SELECT b.id, b.leased_until FROM "outbox".messages AS b
     WHERE b.id = ANY (ARRAY(SELECT id FROM oldest WHERE id IS NOT NULL))
       FOR KEY SHARE SKIP LOCKED
), heads AS MATERIALIZED (
    SELECT d.id, d.leased_by, d.available_at, d.size
      FROM due AS d
     WHERE d.id = ANY (ARRAY(SELECT id FROM blockers))
), claimable AS MATERIALIZED (
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM heads) AS s
     WHERE upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool)
), marked AS (
    UPDATE "outbox".messages AS m
       SET waiting = true
     WHERE m.id = ANY (ARRAY(
           SELECT d.id FROM due AS d JOIN blockers AS b ON b.id = (SELECT o.id FROM oldest AS o WHERE o.key = d.key)
            WHERE d.id > b.id
              AND b.id <> ALL (ARRAY(SELECT id FROM due))
              AND NOT coalesce(b.leased_until > now() + @lease::interval - @mark_after::interval
                               AND b.leased_until <= now() + @lease::interval, false)))
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
)
SELECT *, NULL::text FROM leased
