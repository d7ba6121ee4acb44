SELECT "outbox".messages_analyze(@min_rows::bigint)
