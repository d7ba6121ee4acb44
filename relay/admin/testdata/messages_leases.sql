SELECT coalesce(leased_by, '') AS relay_id, count(*) AS rows,
       min(leased_until) AS earliest_lease_end, max(leased_until) AS latest_lease_end
  FROM "outbox".messages_all
 WHERE leased_until > now()
 GROUP BY 1
 ORDER BY 2 DESC, 1
