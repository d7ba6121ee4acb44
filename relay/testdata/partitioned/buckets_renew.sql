UPDATE "outbox".buckets SET lease_until = now() + @lease::interval
 WHERE owner = @relay_id AND lease_until > now()
RETURNING bucket, epoch
