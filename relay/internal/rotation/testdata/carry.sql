SELECT carried, attached, busy
  FROM "outbox".messages_carry(@chunk::integer, @lock_wait_ms::float8 * interval '1 millisecond',
                               @settle_s::float8 * interval '1 second')
