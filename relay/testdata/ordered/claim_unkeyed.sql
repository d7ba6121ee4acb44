WITH due AS MATERIALIZED (
    SELECT id, leased_by, available_at, CASE WHEN octet_length(c.payload) <= @payload_max::bigint THEN octet_length(c.payload) ELSE 0 END AS size
      FROM "outbox".messages_all AS c
     WHERE available_at <= now()
       AND available_at >= @floor::timestamptz
       AND (available_at, id) >= (@after_at::timestamptz, @after_id::bigint)
       AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
       AND coalesce(destination, @default_sink) <> ALL (@closed_sinks::text[])
       AND c.key IS NULL
     ORDER BY available_at, id
     LIMIT @limit
       FOR UPDATE SKIP LOCKED
), fits AS MATERIALIZED (
    SELECT id, leased_by FROM due
     WHERE (SELECT sum(size) FROM due) <= @byte_budget::bigint
     UNION ALL
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER (ORDER BY available_at, id) AS upto,
               row_number() OVER (ORDER BY available_at, id) AS n
          FROM due) AS s
     WHERE (SELECT sum(size) FROM due) > @byte_budget::bigint
       AND (upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool))
)
    UPDATE "outbox".messages_all AS m
       SET attempts = least(greatest(m.attempts, 0), 1000000) + 1,
           claim_seq = CASE WHEN m.claim_seq >= 2147483646 OR m.claim_seq < 0 THEN 1 ELSE m.claim_seq + 1 END,
           leased_by = @relay_id,
           leased_until = now() + @lease::interval
     WHERE m.id = ANY (ARRAY(SELECT id FROM fits))
 RETURNING m.id, CASE WHEN octet_length(m.topic) <= 255 THEN m.topic END AS topic, CASE WHEN octet_length(m.payload) <= @payload_max::bigint THEN m.payload END AS payload, CASE WHEN octet_length(m.key) <= 4000 THEN m.key END AS key,
           CASE WHEN pg_column_size(m.headers) <= 256 THEN m.headers
                WHEN octet_length(m.headers::text) <= 16384 THEN m.headers END AS headers,
           CASE WHEN octet_length(m.idempotency_key) <= 800 THEN m.idempotency_key END AS idempotency_key, CASE WHEN octet_length(m.destination) <= 255 THEN m.destination END AS destination,
           m.created_at, m.attempts, m.claim_seq,
           m.id = ANY (ARRAY(SELECT id FROM fits WHERE leased_by IS NOT NULL)) AS rescued,
           CASE WHEN m.dedup
                THEN (SELECT true FROM "outbox".delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL
                ELSE false END AS duplicate,
           0 AS bucket,
           CASE WHEN octet_length(m.payload) > @payload_max::bigint THEN 'payload ' || octet_length(m.payload)
                WHEN octet_length(m.topic) > 255 THEN 'topic ' || octet_length(m.topic)
                WHEN octet_length(m.key) > 4000 THEN 'key ' || octet_length(m.key)
                WHEN octet_length(m.idempotency_key) > 800 THEN 'idempotency_key ' || octet_length(m.idempotency_key)
                WHEN octet_length(m.destination) > 255 THEN 'destination ' || octet_length(m.destination)
                WHEN pg_column_size(m.headers) > 256
                     THEN CASE WHEN octet_length(m.headers::text) > 16384 THEN 'headers ' || octet_length(m.headers::text) END
           END AS too_large, m.available_at AS due_at, NULL::text AS held_key
