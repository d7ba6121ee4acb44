SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::bigint,
       (coalesce((SELECT sum(pg_stat_get_xact_blocks_fetched(g.relid)) FROM "outbox".message_generations AS g), 0)
        + coalesce(sum(pg_stat_get_xact_blocks_fetched(i.indexrelid)), 0))::bigint
  FROM pg_index AS i
 WHERE i.indrelid IN (SELECT g.relid FROM "outbox".message_generations AS g)
