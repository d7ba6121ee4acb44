WITH turn AS (
    UPDATE "outbox".gauge_readings
       SET counting_until = now() + @hold::interval, counted_by = @relay
     WHERE counted_at <= now() - @fresh::interval AND counting_until <= now()
 RETURNING now() AS began
)
SELECT (SELECT began FROM turn), g.readings,
       CASE WHEN isfinite(g.counted_at) THEN greatest(extract(epoch FROM now() - g.counted_at)::float8, 0) ELSE 0 END
  FROM "outbox".gauge_readings AS g
