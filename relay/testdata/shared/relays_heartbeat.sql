WITH seen AS (
    INSERT INTO "outbox".relays (id, version, mode, notify, default_sink, sinks)
    VALUES (@relay_id, @version, @mode, @notify, @default_sink, @sinks::text[])
    ON CONFLICT (id) DO UPDATE SET version = excluded.version, mode = excluded.mode, notify = excluded.notify,
                                   default_sink = excluded.default_sink, sinks = excluded.sinks, last_seen = now()
)
SELECT mode FROM "outbox".relay_mode
