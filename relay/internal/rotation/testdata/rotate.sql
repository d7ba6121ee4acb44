SELECT generation, busy
  FROM "outbox".messages_rotate(@every_s::float8 * interval '1 second',
                                @lock_wait_ms::float8 * interval '1 millisecond')
