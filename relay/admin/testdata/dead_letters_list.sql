SELECT d.id, d.topic, coalesce(d.key, '') AS key, d.idempotency_key, coalesce(d.destination, '') AS destination,
       d.attempts, d.reason, d.error, d.failed_at, d.created_at, octet_length(d.payload) AS payload_bytes,
       count(*) OVER () AS matched
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
