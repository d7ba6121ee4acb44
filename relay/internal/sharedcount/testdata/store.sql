UPDATE "outbox".gauge_readings
   SET counted_at = @began::timestamptz, readings = @readings::jsonb,
       counting_until = CASE WHEN counted_by = @relay THEN '-infinity'::timestamptz ELSE counting_until END
 WHERE counted_at <= @began::timestamptz
