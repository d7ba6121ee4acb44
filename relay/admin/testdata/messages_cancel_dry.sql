SELECT count(*) AS matched,
       count(*) FILTER (WHERE m.leased_until IS NULL OR m.leased_until <= now()) AS cancelled,
       count(*) FILTER (WHERE m.leased_until > now()) AS in_flight
  FROM "outbox".messages_all AS m
 WHERE (@key::text IS NULL OR m.key = @key)
   AND (@topic::text IS NULL OR m.topic = @topic)
   AND (@topic_pattern::text IS NULL OR m.topic LIKE @topic_pattern)
