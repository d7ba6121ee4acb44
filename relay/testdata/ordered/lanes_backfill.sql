INSERT INTO "outbox".lanes (key)
SELECT DISTINCT key FROM "outbox".messages WHERE key IS NOT NULL
ON CONFLICT (key) DO NOTHING
