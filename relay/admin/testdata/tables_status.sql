SELECT t.name AS "table", sum(pg_total_relation_size(p.relid))::bigint AS total_bytes,
       coalesce(sum(s.n_live_tup), 0)::bigint AS live_tuples, coalesce(sum(s.n_dead_tup), 0)::bigint AS dead_tuples,
       max(s.last_vacuum) AS last_vacuum, max(s.last_autovacuum) AS last_autovacuum
  FROM unnest(ARRAY['messages', 'archive', 'delivered_keys', 'dead_letters']::name[]) WITH ORDINALITY AS t (name, ord)
 CROSS JOIN LATERAL (SELECT g.relid AS oid FROM "outbox".message_generations AS g WHERE t.name = 'messages'
                     UNION ALL
                     SELECT format('%I.%I', @schema_name::text, t.name)::regclass WHERE t.name <> 'messages') AS c
 CROSS JOIN LATERAL (SELECT tree.relid FROM pg_catalog.pg_partition_tree(c.oid) AS tree WHERE tree.isleaf
                     UNION ALL
                     SELECT k.oid FROM pg_catalog.pg_class AS k WHERE k.oid = c.oid AND k.relkind = 'r') AS p
  LEFT JOIN pg_catalog.pg_stat_user_tables AS s ON s.relid = p.relid
 GROUP BY t.name, t.ord
 ORDER BY t.ord
