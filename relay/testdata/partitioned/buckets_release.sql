UPDATE "outbox".buckets AS b
   SET owner = NULL, lease_until = now(), changed_at = now()
  FROM unnest(@buckets::int[], @epochs::bigint[]) AS r(bucket, epoch)
 WHERE b.bucket = r.bucket AND b.epoch = r.epoch AND b.owner = @relay_id
RETURNING b.bucket
