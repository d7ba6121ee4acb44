SELECT now(), pg_current_snapshot()::text, pg_current_xact_id()::text,
       (SELECT available_at FROM "outbox".messages
         WHERE available_at >= @start::timestamptz
         ORDER BY available_at
         LIMIT 1)
