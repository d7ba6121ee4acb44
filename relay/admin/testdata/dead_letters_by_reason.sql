SELECT reason AS value, count(*) AS count, max(failed_at) AS last_failed_at
  FROM "outbox".dead_letters
 GROUP BY reason
 ORDER BY 2 DESC, 1
