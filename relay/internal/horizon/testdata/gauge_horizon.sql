SELECT h.holder,
       coalesce((array_agg(x.age_seconds ORDER BY x.age_xids DESC, x.age_seconds DESC)
                   FILTER (WHERE x.age_seconds IS NOT NULL))[1], 0)::float8,
       coalesce(max(x.age_xids), 0)::bigint,
       pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')
  FROM (VALUES (1, 'session'), (2, 'prepared'), (3, 'replication')) AS h(n, holder)
  LEFT JOIN (
    SELECT CASE WHEN a.datid IS NULL OR a.backend_type = 'walsender' THEN 'replication' ELSE 'session' END AS holder,
           extract(epoch FROM now() - a.xact_start)::float8 AS age_seconds,
           greatest(age(a.backend_xmin), age(a.backend_xid))::bigint AS age_xids
      FROM pg_catalog.pg_stat_activity AS a
     WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND (a.datid IS NULL OR a.datid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()))
       AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
     UNION ALL
    SELECT 'prepared', extract(epoch FROM now() - p.prepared)::float8, age(p.transaction)::bigint
      FROM pg_catalog.pg_prepared_xacts AS p
     WHERE p.database = current_database()
     UNION ALL
    SELECT 'replication', NULL, age(s.xmin)::bigint
      FROM pg_catalog.pg_replication_slots AS s
     WHERE s.xmin IS NOT NULL
       ) AS x ON x.holder = h.holder
 GROUP BY h.n, h.holder
 ORDER BY h.n
