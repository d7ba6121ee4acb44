SELECT now() AS at, mode, changed_at, coalesce(changed_by, '') AS changed_by
  FROM "outbox".relay_mode
