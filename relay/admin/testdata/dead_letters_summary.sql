SELECT GROUPING(reason) = 0 AS by_reason, coalesce(reason, error) AS value, count(*) AS count,
       max(failed_at) AS last_failed_at
  FROM "outbox".dead_letters
 GROUP BY GROUPING SETS ((reason), (error))
