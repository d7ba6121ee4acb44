WITH seen AS (
    INSERT INTO "outbox".relays (id, version, mode, notify) VALUES (@relay_id, @version, @mode, @notify)
    ON CONFLICT (id) DO UPDATE SET version = excluded.version, mode = excluded.mode, notify = excluded.notify, last_seen = now()
)
SELECT mode FROM "outbox".relay_mode
