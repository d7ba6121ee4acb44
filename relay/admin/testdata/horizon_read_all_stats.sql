SELECT pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE') AS sees_all_sessions
