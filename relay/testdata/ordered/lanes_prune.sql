SELECT "outbox".lanes_prune(@keys::text[])
