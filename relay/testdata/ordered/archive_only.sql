WITH archived AS (
    DELETE FROM "outbox".messages_all AS m
     USING unnest(@archive_ids::bigint[], @archive_seqs::int[], @archive_duplicate::bool[]) AS s(id, claim_seq, duplicate)
     WHERE m.id = ANY (@archive_ids::bigint[]) AND m.id = s.id AND m.claim_seq = s.claim_seq
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
