SELECT (SELECT count(*) FROM (SELECT 1 FROM "outbox".messages_all
                               WHERE last_error IS NOT NULL AND available_at > now()
                                 AND leased_by IS NULL AND attempts > 0
                               LIMIT @cap) AS b),
       coalesce(extract(epoch FROM now() - (
           SELECT min(available_at) FROM "outbox".messages_all
            WHERE available_at <= now() AND available_at >= @floor::timestamptz
              AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours'))), 0)::float8,
       (SELECT count(*) FROM (SELECT 1 FROM "outbox".dead_letters LIMIT @cap) AS d),
       coalesce((SELECT sum(n_dead_tup) FROM pg_catalog.pg_stat_user_tables
                  WHERE schemaname = @schema_name AND relid IN (SELECT relid FROM "outbox".message_generations)), 0)::bigint,
       (SELECT count(*) FROM pg_catalog.pg_locks
         WHERE NOT granted AND relation IN (SELECT relid FROM "outbox".message_generations)),
       now()
