WITH RECURSIVE keys AS (
    (SELECT key FROM "outbox".messages WHERE key IS NOT NULL ORDER BY key LIMIT 1)
    UNION ALL
    SELECT (SELECT m.key FROM "outbox".messages AS m WHERE m.key > k.key ORDER BY m.key LIMIT 1)
      FROM keys AS k
     WHERE k.key IS NOT NULL
)
INSERT INTO "outbox".lanes (key)
SELECT key FROM keys
 WHERE key IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM "outbox".lanes AS l WHERE l.key = keys.key)
ON CONFLICT (key) DO NOTHING
RETURNING key
