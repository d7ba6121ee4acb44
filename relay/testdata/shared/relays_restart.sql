UPDATE "outbox".relays SET started_at = now() WHERE id = @relay_id
