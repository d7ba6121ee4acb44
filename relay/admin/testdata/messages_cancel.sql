WITH matched AS (
    SELECT count(*) AS n
  FROM "outbox".messages_all AS m
 WHERE (@key::text IS NULL OR m.key = @key)
   AND (@topic::text IS NULL OR m.topic = @topic)
   AND (@topic_pattern::text IS NULL OR m.topic LIKE @topic_pattern)
), picked AS (
    SELECT m.id
  FROM "outbox".messages_all AS m
 WHERE (@key::text IS NULL OR m.key = @key)
   AND (@topic::text IS NULL OR m.topic = @topic)
   AND (@topic_pattern::text IS NULL OR m.topic LIKE @topic_pattern)
       AND (m.leased_until IS NULL OR m.leased_until <= now())
     ORDER BY m.id
       FOR UPDATE SKIP LOCKED
), cancelled AS (
    DELETE FROM "outbox".messages_all AS m
     USING picked
     WHERE m.id = picked.id
    RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
              m.created_at, m.attempts, m.available_at, coalesce(m.first_error, m.last_error) AS first_error
), dead AS (
    INSERT INTO "outbox".dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                       created_at, attempts, reason, error, available_at, first_error)
    SELECT id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, @reason::text, @error::text, available_at,
           first_error
      FROM cancelled
    RETURNING 1
)
SELECT (SELECT n FROM matched) AS matched, (SELECT count(*) FROM dead) AS cancelled,
       (SELECT coalesce(array_agg(DISTINCT key), '{}') FROM cancelled WHERE key IS NOT NULL) AS keys
