UPDATE "outbox".buckets SET lease_until = now() + $2::interval
 WHERE owner = $1 AND lease_until > now()
RETURNING bucket, epoch
