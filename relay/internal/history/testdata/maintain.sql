SELECT created, dropped, dropped_rows, busy
  FROM "outbox".history_maintain(@table::text, @at::timestamptz,
                                 @width_s::float8 * interval '1 second',
                                 @keep_s::float8 * interval '1 second',
                                 @lock_wait_ms::float8 * interval '1 millisecond')
