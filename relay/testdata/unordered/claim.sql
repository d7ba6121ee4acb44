WITH due AS MATERIALIZED (
    SELECT id, leased_by, available_at, octet_length(payload) AS size
      FROM "outbox".messages AS c
     WHERE available_at <= now()
       AND available_at >= @floor::timestamptz
       AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
       AND coalesce(destination, @default_sink) <> ALL (@closed_sinks::text[])
     ORDER BY available_at, id
     LIMIT @limit
       FOR UPDATE SKIP LOCKED
), fits AS MATERIALIZED (
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM due) AS s
     WHERE upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool)
), leased AS (
    UPDATE "outbox".messages AS m
       SET attempts = least(greatest(m.attempts, 0), 1000000) + 1,
           claim_seq = CASE WHEN m.claim_seq >= 2147483646 OR m.claim_seq < 0 THEN 1 ELSE m.claim_seq + 1 END,
           leased_by = @relay_id,
           leased_until = now() + @lease::interval
     WHERE m.id = ANY (ARRAY(SELECT id FROM fits))
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, m.claim_seq,
           m.id = ANY (ARRAY(SELECT id FROM fits WHERE leased_by IS NOT NULL)) AS rescued,
           CASE WHEN m.dedup
                THEN (SELECT true FROM "outbox".delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL
                ELSE false END AS duplicate,
           0 AS bucket
)
SELECT *, NULL::text FROM leased
