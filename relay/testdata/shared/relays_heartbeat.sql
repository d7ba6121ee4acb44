WITH seen AS (
    INSERT INTO "outbox".relays (id, version, mode, notify, default_sink, sinks, claim_floor_lag)
    VALUES (@relay_id, @version, @mode, @notify, @default_sink, @sinks::text[], @claim_floor_lag::double precision)
    ON CONFLICT (id) DO UPDATE SET version = excluded.version, mode = excluded.mode, notify = excluded.notify,
                                   default_sink = excluded.default_sink, sinks = excluded.sinks,
                                   claim_floor_lag = excluded.claim_floor_lag, last_seen = now()
)
SELECT mode FROM "outbox".relay_mode
