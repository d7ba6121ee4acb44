WITH matched AS (
    SELECT a.id, a.topic, a.payload, a.key, a.headers, a.idempotency_key, a.destination, a.delivered_at
      FROM "outbox".archive AS a
     WHERE NOT a.duplicate
       AND (@delivered_from::timestamptz IS NULL OR a.delivered_at >= @delivered_from)
       AND (@delivered_to::timestamptz IS NULL OR a.delivered_at < @delivered_to)
       AND (@created_from::timestamptz IS NULL OR a.created_at >= @created_from)
       AND (@created_to::timestamptz IS NULL OR a.created_at < @created_to)
       AND (@topic::text IS NULL OR a.topic = @topic)
       AND (@topic_pattern::text IS NULL OR a.topic LIKE @topic_pattern)
       AND (@key::text IS NULL OR a.key = @key)
), latest AS (
    SELECT DISTINCT ON (idempotency_key) *
      FROM matched
     ORDER BY idempotency_key, delivered_at DESC, id DESC
), judged AS (
    SELECT l.*, EXISTS (SELECT 1 FROM "outbox".messages_all AS m WHERE m.idempotency_key = l.idempotency_key) AS pending
      FROM latest AS l
)
SELECT (SELECT count(*) FROM matched) AS matched,
       count(*) AS events,
       count(*) FILTER (WHERE pending) AS skipped_pending,
       count(*) FILTER (WHERE NOT pending) AS replayed,
       (SELECT count(*) FROM "outbox".delivered_keys AS k
         WHERE NOT @new_keys::bool
           AND k.idempotency_key IN (SELECT idempotency_key FROM judged WHERE NOT pending)) AS forgotten_keys
  FROM judged
