SELECT r.* FROM (
    (SELECT k.id,
            CASE WHEN k.leased_until > now() THEN 'in flight'
                 WHEN k.available_at <= now() THEN 'pending'
                 WHEN k.attempts = 0 THEN 'delayed'
                 ELSE 'backoff'
            END AS "where",
            k.topic, k.idempotency_key, coalesce(k.destination, '') AS destination, k.attempts, k.created_at,
            k.available_at AS at, coalesce(k.last_error, '') AS error, '' AS reason, coalesce(k.leased_by, '') AS leased_by,
            octet_length(k.payload) AS payload_bytes
       FROM "outbox".messages_all AS k
      WHERE k.key IS NOT NULL
        AND (k.key, k.id) >= (@key::text, -9223372036854775808) AND (k.key, k.id) <= (@key::text, 9223372036854775807)
      ORDER BY k.key DESC, k.id DESC
      LIMIT @limit::bigint + 1)
    UNION ALL
    (SELECT k.id, CASE WHEN k.duplicate THEN 'deduplicated' ELSE 'delivered' END,
            k.topic, k.idempotency_key, coalesce(k.destination, ''), k.attempts, k.created_at,
            k.delivered_at, '', '', '', octet_length(k.payload)
       FROM "outbox".archive AS k
      WHERE k.key IS NOT NULL
        AND (k.key, k.id) >= (@key::text, -9223372036854775808) AND (k.key, k.id) <= (@key::text, 9223372036854775807)
      ORDER BY k.key DESC, k.id DESC
      LIMIT @limit::bigint + 1)
    UNION ALL
    (SELECT k.id, 'dead letter',
            k.topic, k.idempotency_key, coalesce(k.destination, ''), k.attempts, k.created_at,
            k.failed_at, k.error, k.reason, '', octet_length(k.payload)
       FROM "outbox".dead_letters AS k
      WHERE k.key IS NOT NULL
        AND (k.key, k.id) >= (@key::text, -9223372036854775808) AND (k.key, k.id) <= (@key::text, 9223372036854775807)
      ORDER BY k.key DESC, k.id DESC
      LIMIT @limit::bigint + 1)
) AS r
 ORDER BY r.id DESC
 LIMIT @limit::bigint + 1
