DELETE FROM "outbox".relays WHERE last_seen < now() - $1::interval
