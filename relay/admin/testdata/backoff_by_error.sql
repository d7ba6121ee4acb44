SELECT coalesce(last_error, '') AS error, count(*) AS count, min(available_at) AS next_retry_at
  FROM "outbox".messages_all
 WHERE available_at > now() AND leased_by IS NULL AND attempts > 0
 GROUP BY 1
 ORDER BY 2 DESC, 3
 LIMIT @limit
