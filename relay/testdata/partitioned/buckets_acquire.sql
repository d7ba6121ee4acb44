UPDATE "outbox".buckets AS b
   SET owner = $1, epoch = b.epoch + 1, lease_until = now() + $2::interval, changed_at = now()
 WHERE b.bucket = ANY (ARRAY(
       SELECT bucket FROM "outbox".buckets
        WHERE owner IS NULL OR lease_until <= now()
        ORDER BY bucket
        LIMIT $3
          FOR UPDATE))
RETURNING b.bucket, b.epoch
