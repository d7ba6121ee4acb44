UPDATE "outbox".buckets AS b
   SET owner = @relay_id, epoch = b.epoch + 1, lease_until = now() + @lease::interval, changed_at = now()
 WHERE b.bucket = ANY (ARRAY(
       SELECT bucket FROM "outbox".buckets
        WHERE owner IS NULL OR lease_until <= now()
        ORDER BY bucket
        LIMIT @want
          FOR UPDATE))
RETURNING b.bucket, b.epoch
