SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::bigint,
       (pg_stat_get_xact_blocks_fetched('"outbox".messages'::regclass)
        + coalesce(sum(pg_stat_get_xact_blocks_fetched(i.indexrelid)), 0))::bigint
  FROM pg_index AS i
 WHERE i.indrelid = '"outbox".messages'::regclass
