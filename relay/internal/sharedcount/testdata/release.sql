UPDATE "outbox".gauge_readings
   SET counting_until = '-infinity'
 WHERE counted_by = @relay AND counting_until > now()
