SELECT r.at, m.created, m.dropped, m.dropped_rows, m.busy
  FROM (SELECT coalesce(@at::timestamptz, now()) AS at) AS r,
       "outbox".history_maintain(@table::text, r.at,
                                 @width_s::float8 * interval '1 second',
                                 @keep_s::float8 * interval '1 second',
                                 @lock_wait_ms::float8 * interval '1 millisecond') AS m
