SELECT (SELECT available_at FROM "outbox".messages_all
         WHERE available_at >= @start::timestamptz
         ORDER BY available_at
         LIMIT 1),
       (SELECT id FROM "outbox".messages_all
         WHERE id >= @start_id::bigint
         ORDER BY id
         LIMIT 1)
