UPDATE "outbox".relays SET started_at = now() WHERE id = $1
