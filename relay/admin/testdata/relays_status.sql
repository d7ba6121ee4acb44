SELECT id, version, mode, started_at, last_seen, last_seen > now() - @alive::interval AS alive,
       claim_floor_lag
  FROM "outbox".relays
 ORDER BY alive DESC, id
