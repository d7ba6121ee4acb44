SELECT d.id, d.topic, coalesce(d.key, '') AS key, d.idempotency_key, coalesce(d.destination, '') AS destination,
       d.attempts, d.reason, d.error, coalesce(d.first_error, '') AS first_error, d.failed_at, d.created_at,
       octet_length(d.payload) AS payload_bytes,
       CASE WHEN jsonb_typeof(d.headers) = 'object'
            THEN coalesce((SELECT jsonb_object_agg(h.key, coalesce(h.value, 'null')) FROM jsonb_each_text(d.headers) AS h), '{}')
            WHEN jsonb_typeof(d.headers) <> 'null'
            THEN jsonb_build_object('', d.headers #>> '{}')
       END AS headers,
       d.available_at, substring(d.payload FROM 1 FOR @preview::integer) AS payload,
       octet_length(d.payload) > @preview::integer AS payload_truncated
  FROM "outbox".dead_letters AS d
 WHERE d.id = @id
