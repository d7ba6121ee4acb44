(SELECT coalesce(max(h.age_xids), 0) FROM (
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
       ) AS h)
