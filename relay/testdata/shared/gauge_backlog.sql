SELECT coalesce(destination, @default_sink), count(*)
  FROM (SELECT destination FROM "outbox".messages_all
         WHERE available_at <= now() AND available_at >= @floor::timestamptz
           AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
         LIMIT @cap) AS due
 GROUP BY 1
