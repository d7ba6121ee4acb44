SELECT slot, generation, state, table_name, since, attached, live_rows, dead_rows, total_bytes
  FROM "outbox".messages_generations()
