SELECT (SELECT count(*)
          FROM (SELECT key FROM "outbox".lanes WHERE available_at > now() LIMIT @lanes_cap) AS l,
               LATERAL (SELECT m.attempts, m.leased_by, m.available_at FROM "outbox".messages AS m
                         WHERE m.key IS NOT NULL AND (m.key, m.id) >= (l.key, (CASE WHEN EXISTS (SELECT 1 FROM unnest(@passed_writers::text[]::xid8[]) AS w
                                     WHERE pg_visible_in_snapshot(w, pg_current_snapshot()))
                  THEN -9223372036854775808 ELSE @id_floor::bigint END)) AND (m.key, m.id) <= (l.key, 9223372036854775807) ORDER BY m.key, m.id LIMIT 1) AS h
         WHERE h.attempts > 0 AND h.leased_by IS NULL AND h.available_at > now()),
       greatest((SELECT count(*) FROM (SELECT 1 FROM "outbox".messages WHERE key IS NOT NULL LIMIT @cap) AS k)
              - (SELECT count(*) FROM (SELECT 1 FROM "outbox".lanes LIMIT @cap) AS l), 0)
