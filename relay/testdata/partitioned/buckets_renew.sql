WITH renewed AS (
    UPDATE "outbox".buckets SET lease_until = now() + @lease::interval
     WHERE owner = @relay_id AND lease_until > now() AND lease_until <= now() + @renew_within::interval
)
SELECT bucket, epoch FROM "outbox".buckets
 WHERE owner = @relay_id AND lease_until > now()
