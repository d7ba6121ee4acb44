-- Opt-in wake-up (RELAY_NOTIFY): while a relay that asked for it is alive,
-- every statement that inserts into messages sends one NOTIFY, and the relay
-- claims at once instead of at its next poll. NOTIFY takes a lock held until
-- commit that serializes committing transactions, so it is off unless a
-- relay wants it; polling stays the fallback either way.
ALTER TABLE {{.schema}}.relays ADD COLUMN notify boolean NOT NULL DEFAULT false;

CREATE FUNCTION {{.schema}}.messages_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {{.schema}}.relays WHERE notify AND last_seen > now() - interval '30 seconds') THEN
        PERFORM pg_notify('outbox_relay_' || left(md5(TG_TABLE_SCHEMA), 16), '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_notify AFTER INSERT ON {{.schema}}.messages
    FOR EACH STATEMENT EXECUTE FUNCTION {{.schema}}.messages_notify();
