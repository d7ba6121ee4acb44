SELECT id, version, mode, started_at, last_seen, last_seen > now() - @alive::interval AS alive
  FROM "outbox".relays
 ORDER BY alive DESC, id
