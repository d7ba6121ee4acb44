SELECT relname AS "table", pg_total_relation_size(relid) AS total_bytes,
       n_live_tup AS live_tuples, n_dead_tup AS dead_tuples, last_vacuum, last_autovacuum
  FROM pg_catalog.pg_stat_user_tables
 WHERE schemaname = @schema_name AND relname IN ('messages', 'archive', 'delivered_keys', 'dead_letters')
 ORDER BY array_position(ARRAY['messages', 'archive', 'delivered_keys', 'dead_letters']::name[], relname)
