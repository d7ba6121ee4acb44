WITH by_topic AS (
    SELECT reason, error, topic, count(*) AS count, min(failed_at) AS first_failed_at, max(failed_at) AS last_failed_at
      FROM "outbox".dead_letters
     GROUP BY reason, error, topic
), groups AS (
    SELECT reason, error, sum(count)::bigint AS count, min(first_failed_at) AS first_failed_at,
           max(last_failed_at) AS last_failed_at, count(*) AS topics,
           sum(sum(count)) OVER ()::bigint AS total, count(*) OVER () AS groups
      FROM by_topic
     GROUP BY reason, error
     ORDER BY 3 DESC, 5 DESC, reason, error
     LIMIT @limit
)
SELECT g.reason, g.error, g.count, g.first_failed_at, g.last_failed_at, g.topics, g.total, g.groups,
       (SELECT max(d.id) FROM "outbox".dead_letters AS d
         WHERE d.failed_at = g.last_failed_at AND d.reason = g.reason AND d.error = g.error) AS example_id
  FROM groups AS g
 ORDER BY g.count DESC, g.last_failed_at DESC, g.reason, g.error
