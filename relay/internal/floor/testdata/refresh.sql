SELECT now(), pg_current_snapshot()::text,
       pg_sequence_last_value('"outbox".messages_id_seq'::regclass),
       pg_current_xact_id()::text,
       (SELECT s.seqcache = 1 AND NOT s.seqcycle AND s.seqincrement > 0
          FROM pg_sequence AS s
         WHERE s.seqrelid = '"outbox".messages_id_seq'::regclass),
       (SELECT available_at FROM "outbox".messages_all
         WHERE available_at >= @start::timestamptz
         ORDER BY available_at
         LIMIT 1),
       (SELECT id FROM "outbox".messages_all
         WHERE id >= @start_id::bigint
         ORDER BY id
         LIMIT 1)
