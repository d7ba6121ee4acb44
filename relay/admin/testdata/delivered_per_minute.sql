SELECT m.minute,
       count(a.delivered_at) FILTER (WHERE NOT a.duplicate) AS delivered,
       count(a.delivered_at) FILTER (WHERE a.duplicate) AS deduplicated
  FROM generate_series(date_trunc('minute', now()) - (@minutes - 1) * interval '1 minute', date_trunc('minute', now()), interval '1 minute') AS m(minute)
  LEFT JOIN "outbox".archive AS a
    ON a.delivered_at >= m.minute AND a.delivered_at < m.minute + interval '1 minute'
 GROUP BY 1
 ORDER BY 1
