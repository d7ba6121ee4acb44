SELECT id FROM "outbox".relays
 WHERE mode = 'partitioned' AND last_seen > now() - @alive::interval
 ORDER BY id
