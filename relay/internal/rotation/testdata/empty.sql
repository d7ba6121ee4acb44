SELECT emptied, busy
  FROM "outbox".messages_empty(@lock_wait_ms::float8 * interval '1 millisecond')
