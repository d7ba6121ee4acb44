SELECT slot, generation, state, table_name, since, extract(epoch FROM now() - since)::float8 AS age_seconds,
       attached, live_rows, dead_rows, total_bytes
  FROM "outbox".messages_generations()
