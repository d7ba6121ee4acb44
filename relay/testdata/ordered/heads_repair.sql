UPDATE "outbox".messages AS m
   SET waiting = false, available_at = greatest(m.available_at, clock_timestamp())
 WHERE m.id = ANY (ARRAY(
       SELECT x.id FROM "outbox".messages AS x
        WHERE x.waiting
          AND NOT EXISTS (SELECT 1 FROM "outbox".messages AS o
                           WHERE o.key IS NOT NULL AND (o.key, o.id) >= (x.key, (CASE WHEN EXISTS (SELECT 1 FROM unnest(@passed_writers::text[]::xid8[]) AS w
                                     WHERE pg_visible_in_snapshot(w, pg_current_snapshot()))
                  THEN -9223372036854775808 ELSE @id_floor::bigint END)) AND (o.key, o.id) <= (x.key, 9223372036854775807) AND o.id < x.id)
        LIMIT @cap))
   AND m.waiting AND (SELECT pg_current_xact_id()) IS NOT NULL
RETURNING m.key
