UPDATE "outbox".messages_all AS m
   SET waiting = false, available_at = greatest(m.available_at, clock_timestamp())
 WHERE m.id = ANY (ARRAY(
       WITH RECURSIVE first_waiting AS (
           (SELECT x.key, x.id FROM "outbox".messages_all AS x
             WHERE x.waiting
             ORDER BY x.key, x.id
             LIMIT 1)
           UNION ALL
           SELECT n.key, n.id
             FROM first_waiting AS f,
                  LATERAL (SELECT x.key, x.id FROM "outbox".messages_all AS x
                            WHERE x.waiting AND x.key > f.key
                            ORDER BY x.key, x.id
                            LIMIT 1) AS n
       )
       SELECT f.id FROM first_waiting AS f
        WHERE NOT EXISTS (SELECT 1 FROM "outbox".messages_all AS o
                           WHERE o.key IS NOT NULL AND (o.key, o.id) >= (f.key, (SELECT least(min(w.id), @id_floor::bigint)
                    FROM unnest(@passed_writers::text[]::xid8[], @passed_ids::bigint[]) AS w(x, id)
                   WHERE pg_visible_in_snapshot(w.x, pg_current_snapshot()))) AND (o.key, o.id) <= (f.key, 9223372036854775807) AND o.id < f.id)
        LIMIT @cap))
   AND coalesce(m.waiting, false) AND (SELECT pg_current_xact_id()) IS NOT NULL
RETURNING m.key
