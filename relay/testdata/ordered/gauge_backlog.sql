WITH unkeyed AS (
    SELECT destination, available_at FROM "outbox".messages_all
     WHERE key IS NULL AND available_at <= now() AND available_at >= @floor::timestamptz AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
     ORDER BY available_at
     LIMIT @cap
), heads AS (
    SELECT destination, available_at FROM "outbox".messages_all
     WHERE key IS NOT NULL AND NOT waiting
       AND available_at <= now() AND available_at >= @floor::timestamptz AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
     ORDER BY available_at
     LIMIT @cap
)
SELECT coalesce(destination, @default_sink), count(*), min(available_at)
  FROM (SELECT * FROM unkeyed UNION ALL SELECT * FROM heads) AS due
 GROUP BY 1
