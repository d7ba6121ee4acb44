SELECT least(
           (SELECT available_at FROM "outbox".messages_all
             WHERE key IS NOT NULL AND NOT waiting AND available_at >= @start::timestamptz
             ORDER BY available_at
             LIMIT 1),
           (SELECT available_at FROM "outbox".messages_all
             WHERE key IS NULL AND available_at >= @start::timestamptz
             ORDER BY available_at
             LIMIT 1)),
       (SELECT id FROM "outbox".messages_all
         WHERE id >= @start_id::bigint
         ORDER BY id
         LIMIT 1)
