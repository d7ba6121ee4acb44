UPDATE "outbox".messages_all AS m
   SET waiting = false, available_at = greatest(m.available_at, clock_timestamp())
 WHERE m.id = ANY (ARRAY(
       SELECT (SELECT q.id FROM "outbox".messages_all AS q
                WHERE q.waiting AND q.key IS NOT NULL
                  AND (q.key, q.id) > (k.key, k.after) AND (q.key, q.id) <= (k.key, 9223372036854775807)
                ORDER BY q.key, q.id LIMIT 1)
         FROM unnest(@keys::text[], @after::bigint[]) AS k(key, after)))
   AND coalesce(m.waiting, false) AND (SELECT pg_current_xact_id()) IS NOT NULL
