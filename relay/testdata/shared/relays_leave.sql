DELETE FROM "outbox".relays WHERE id = $1
