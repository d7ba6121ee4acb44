WITH unkeyed AS (
    SELECT destination, available_at FROM "outbox".messages
     WHERE key IS NULL AND available_at <= now() AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '1 day')
     ORDER BY available_at
     LIMIT @cap
), heads AS (
    SELECT h.destination, h.available_at
      FROM (SELECT key FROM "outbox".lanes WHERE available_at <= now() LIMIT @cap) AS l,
           LATERAL (SELECT m.destination, m.available_at, m.leased_until FROM "outbox".messages AS m
                     WHERE m.key IS NOT NULL AND (m.key, m.id) >= (l.key, (CASE WHEN EXISTS (SELECT 1 FROM unnest(@passed_writers::text[]::xid8[]) AS w
                                     WHERE pg_visible_in_snapshot(w, pg_current_snapshot()))
                  THEN -9223372036854775808 ELSE @id_floor::bigint END)) AND (m.key, m.id) <= (l.key, 9223372036854775807) ORDER BY m.key, m.id LIMIT 1) AS h
     WHERE h.available_at <= now() AND (h.leased_until IS NULL OR h.leased_until <= now())
)
SELECT coalesce(destination, @default_sink), count(*), min(available_at)
  FROM (SELECT * FROM unkeyed UNION ALL SELECT * FROM heads) AS due
 GROUP BY 1
