SELECT coalesce(destination, @default_sink) AS destination,
       count(*) AS pending,
       count(*) FILTER (WHERE due AND NOT waiting) AS due,
       min(available_at) FILTER (WHERE due AND NOT waiting) AS oldest_due_at,
       count(*) FILTER (WHERE in_flight) AS in_flight,
       count(*) FILTER (WHERE backoff) AS backoff,
       min(available_at) FILTER (WHERE backoff) AS next_retry_at,
       count(*) FILTER (WHERE delayed AND NOT waiting) AS delayed,
       min(available_at) FILTER (WHERE delayed AND NOT waiting) AS next_delayed_at,
       count(*) FILTER (WHERE waiting) AS waiting
  FROM (SELECT destination, available_at,
               available_at <= now() AND (leased_until IS NULL OR leased_until <= now()) AS due,
               leased_until > now() AS in_flight,
               available_at > now() AND leased_by IS NULL AND attempts > 0 AS backoff,
               available_at > now() AND attempts = 0 AS delayed,
               @ordered AND key IS NOT NULL AND id <> min(id) OVER (PARTITION BY key) AND attempts = 0 AS waiting
          FROM "outbox".messages_all) AS m
 GROUP BY 1
 ORDER BY 1
