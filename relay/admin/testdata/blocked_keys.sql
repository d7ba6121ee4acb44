SELECT h.key, h.created_at AS head_created_at, h.attempts, h.available_at AS next_attempt_at,
       coalesce(h.leased_until > now(), false) AS in_flight, coalesce(h.last_error, '') AS last_error,
       (SELECT count(*) FROM "outbox".messages_all AS k WHERE k.key = h.key) AS rows
  FROM "outbox".messages_all AS h
 WHERE h.key IS NOT NULL AND NOT h.waiting
   AND h.attempts > 0 AND h.last_error IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM "outbox".messages_all AS o
                    WHERE o.key IS NOT NULL AND (o.key, o.id) >= (h.key, -9223372036854775808) AND (o.key, o.id) < (h.key, h.id))
 ORDER BY h.created_at
 LIMIT @limit
