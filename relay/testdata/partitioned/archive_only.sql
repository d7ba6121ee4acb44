WITH fence_mine AS MATERIALIZED (
    SELECT b.bucket::integer AS bucket, b.epoch
      FROM "outbox".buckets AS b
     WHERE b.owner = @relay_id AND b.lease_until > clock_timestamp()
), fence AS MATERIALIZED (
    SELECT f.bucket
      FROM unnest(@fence_buckets::int[], @fence_epochs::bigint[]) AS f(bucket, epoch)
      JOIN fence_mine AS b ON b.bucket = f.bucket AND b.epoch = f.epoch
), archived AS (
    DELETE FROM "outbox".messages_all AS m
     USING unnest(@archive_ids::bigint[], @archive_seqs::int[], @archive_duplicate::bool[]) AS s(id, claim_seq, duplicate)
     WHERE m.id = ANY (@archive_ids::bigint[]) AND m.id = s.id AND m.claim_seq = s.claim_seq
       AND "outbox".messages_bucket(m.key, m.id) = ANY (ARRAY(SELECT bucket FROM fence))
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, s.duplicate, m.dedup
), archive_insert AS (
    INSERT INTO "outbox".archive (id, topic, payload, key, headers, idempotency_key, destination,
                               created_at, attempts, delivered_at, duplicate)
    SELECT id, topic, payload, key, headers, idempotency_key, destination,
           created_at, attempts, now(), duplicate
      FROM archived
), keys_insert AS (
    INSERT INTO "outbox".delivered_keys (idempotency_key, delivered_at)
    SELECT idempotency_key, now() FROM archived WHERE dedup AND NOT duplicate
)
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}')
