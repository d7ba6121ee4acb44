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
), requeued AS (
    UPDATE "outbox".messages_all AS m
       SET leased_by = NULL,
           leased_until = NULL,
           available_at = now() + r.delay_us * interval '1 microsecond',
           last_error = coalesce(r.error, m.last_error),
           first_error = coalesce(m.first_error, r.error),
           attempts = greatest(m.attempts - CASE WHEN r.release THEN 1 ELSE 0 END, 0)
      FROM unnest(@requeue_ids::bigint[], @requeue_seqs::int[], @requeue_delay_us::bigint[], @requeue_errors::text[], @requeue_release::bool[])
           AS r(id, claim_seq, delay_us, error, release)
     WHERE m.id = ANY (@requeue_ids::bigint[]) AND m.id = r.id AND m.claim_seq = r.claim_seq
       AND "outbox".messages_bucket(m.key, m.id) = ANY (ARRAY(SELECT bucket FROM fence))
 RETURNING m.id, m.key, m.available_at
), dead AS (
    DELETE FROM "outbox".messages_all AS m
     USING unnest(@dead_ids::bigint[], @dead_seqs::int[], @dead_reasons::text[], @dead_errors::text[]) AS d(id, claim_seq, reason, error)
     WHERE m.id = ANY (@dead_ids::bigint[]) AND m.id = d.id AND m.claim_seq = d.claim_seq
       AND "outbox".messages_bucket(m.key, m.id) = ANY (ARRAY(SELECT bucket FROM fence))
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, d.reason, d.error, m.first_error
), dead_ids AS MATERIALIZED (
    SELECT d.*, CASE WHEN EXISTS (SELECT FROM "outbox".dead_letters AS t WHERE t.id = d.id)
                     THEN nextval('"outbox".messages_id_seq') ELSE d.id END AS dead_id
      FROM dead AS d
), dead_insert AS (
    INSERT INTO "outbox".dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                    created_at, attempts, reason, error, first_error)
    SELECT dead_id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason,
           CASE WHEN dead_id = id THEN error
                ELSE error || ' [dead-lettered as ' || dead_id || ': id ' || id || ' was a dead letter''s already]' END,
           first_error
      FROM dead_ids
)
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}'),
       coalesce((SELECT array_agg(id) FROM requeued), '{}'),
       coalesce((SELECT array_agg(id) FROM dead), '{}'),
       coalesce((SELECT array_agg(id ORDER BY id) FROM dead_ids WHERE dead_id <> id), '{}'),
       coalesce((SELECT array_agg(dead_id ORDER BY id) FROM dead_ids WHERE dead_id <> id), '{}')
