SELECT "outbox".lanes_prune($1::text[])
