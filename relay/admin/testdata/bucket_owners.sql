WITH owners AS (
    SELECT bucket, epoch, lease_until,
           CASE WHEN owner IS NOT NULL AND lease_until > now() THEN owner ELSE '' END AS owner
      FROM "outbox".buckets
), rows AS (
    SELECT "outbox".messages_bucket(key, id) AS bucket,
           count(*) FILTER (WHERE available_at <= now() AND (leased_until IS NULL OR leased_until <= now())) AS due,
           count(*) FILTER (WHERE leased_until > now()) AS in_flight
      FROM "outbox".messages_all
     GROUP BY 1
)
SELECT o.owner AS relay_id, array_agg(o.bucket ORDER BY o.bucket) AS buckets, max(o.epoch) AS epoch,
       min(o.lease_until) FILTER (WHERE o.owner <> '') AS lease_until,
       (SELECT r.last_seen FROM "outbox".relays AS r WHERE r.id = o.owner) AS last_seen,
       coalesce(sum(r.due), 0)::bigint AS due, coalesce(sum(r.in_flight), 0)::bigint AS in_flight
  FROM owners AS o LEFT JOIN rows AS r ON r.bucket = o.bucket
 GROUP BY o.owner
 ORDER BY o.owner = '', o.owner
