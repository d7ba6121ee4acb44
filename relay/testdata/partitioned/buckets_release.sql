UPDATE "outbox".buckets AS b
   SET owner = NULL, lease_until = now(), changed_at = now()
  FROM unnest($2::int[], $3::bigint[]) AS r(bucket, epoch)
 WHERE b.bucket = r.bucket AND b.epoch = r.epoch AND b.owner = $1
RETURNING b.bucket
