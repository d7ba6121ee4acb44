WITH picked AS (
    SELECT d.id, d.idempotency_key
  FROM "outbox".dead_letters AS d
 WHERE (@ids::bigint[] IS NULL OR d.id = ANY (@ids))
   AND (@topic::text IS NULL OR d.topic = @topic)
   AND (@topic_pattern::text IS NULL OR d.topic LIKE @topic_pattern)
   AND (@key::text IS NULL OR d.key = @key)
   AND (@reason::text IS NULL OR d.reason = @reason)
   AND (@error_pattern::text IS NULL OR d.error ILIKE @error_pattern)
   AND (@error_is::text IS NULL OR d.error = @error_is)
   AND (@since::timestamptz IS NULL OR d.failed_at >= @since)
   AND (@until::timestamptz IS NULL OR d.failed_at <= @until)
   AND (@destination::text IS NULL OR d.destination = @destination OR (@destination = '(default)' AND d.destination IS NULL))
 ORDER BY d.failed_at, d.id
 LIMIT @limit
       FOR UPDATE SKIP LOCKED
), judged AS (
    SELECT p.id, p.idempotency_key,
           CASE
               WHEN EXISTS (SELECT 1 FROM "outbox".delivered_keys AS k WHERE k.idempotency_key = p.idempotency_key) THEN 'delivered'
               WHEN EXISTS (SELECT 1 FROM "outbox".messages_all AS m WHERE m.idempotency_key = p.idempotency_key) THEN 'pending'
               WHEN row_number() OVER (PARTITION BY p.idempotency_key ORDER BY p.id DESC) > 1 THEN 'pending'
               ELSE 'retry'
           END AS verdict
      FROM picked AS p
)
SELECT id, verdict FROM judged ORDER BY id
