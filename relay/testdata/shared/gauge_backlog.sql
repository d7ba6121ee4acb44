SELECT coalesce(destination, $1), count(*)
  FROM (SELECT destination FROM "outbox".messages
         WHERE available_at <= now() AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '1 day')
         LIMIT $2) AS due
 GROUP BY 1
