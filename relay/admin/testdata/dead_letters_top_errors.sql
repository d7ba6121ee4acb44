SELECT error AS value, count(*) AS count, max(failed_at) AS last_failed_at
  FROM "outbox".dead_letters
 GROUP BY error
 ORDER BY 2 DESC, 3 DESC
 LIMIT @limit
