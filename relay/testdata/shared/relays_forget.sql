DELETE FROM "outbox".relays WHERE last_seen < now() - @gone::interval
