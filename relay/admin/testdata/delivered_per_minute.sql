SELECT m.minute, coalesce(a.delivered, 0) AS delivered, coalesce(a.deduplicated, 0) AS deduplicated
  FROM generate_series(date_trunc('minute', now()) - (@minutes - 1) * interval '1 minute', date_trunc('minute', now()), interval '1 minute') AS m(minute)
  LEFT JOIN (SELECT date_trunc('minute', delivered_at) AS minute,
                    count(*) FILTER (WHERE NOT duplicate) AS delivered,
                    count(*) FILTER (WHERE duplicate) AS deduplicated
               FROM "outbox".archive
              WHERE delivered_at >= date_trunc('minute', now()) - (@minutes - 1) * interval '1 minute'
              GROUP BY 1) AS a
    ON a.minute = m.minute
 ORDER BY 1
