DELETE FROM "outbox".relays WHERE id = @relay_id
