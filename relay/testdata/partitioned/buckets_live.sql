SELECT id FROM "outbox".relays
 WHERE mode = 'partitioned' AND last_seen > now() - $1::interval
 ORDER BY id
