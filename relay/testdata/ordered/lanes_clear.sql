DELETE FROM "outbox".lanes
