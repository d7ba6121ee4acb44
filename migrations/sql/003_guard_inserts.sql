-- Rows are untrusted input: what a producer writes into the relay's own
-- columns must not stop, strand or misroute any row. A producer's insert
-- gets fresh values there whatever it wrote (attempts and claim_seq 0, no
-- lease, no error; created_at the insert time unless it is a finite time in
-- the past, which the relay's own commands keep when they re-insert a row),
-- and keys that travel as headers are checked: an idempotency key is 1 to
-- 200 characters without control characters (it is Nats-Msg-Id, webhook-id,
-- Idempotency-Key, message_id), an ordering key at most 1000 characters
-- without control characters. A row-level BEFORE trigger: it costs the
-- insert a few microseconds (measured in the README), and the relay's
-- claims, which update these rows, never run it.
CREATE FUNCTION {{.schema}}.messages_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.attempts := 0;
    NEW.claim_seq := 0;
    NEW.leased_by := NULL;
    NEW.leased_until := NULL;
    NEW.last_error := NULL;
    IF NOT isfinite(NEW.created_at) OR NEW.created_at > now() THEN
        NEW.created_at := now();
    END IF;
    IF NOT isfinite(NEW.available_at) THEN
        RAISE EXCEPTION 'outbox: available_at must be a finite time, not %', NEW.available_at
            USING ERRCODE = 'check_violation', COLUMN = 'available_at';
    END IF;
    IF length(NEW.idempotency_key) > 200 OR NEW.idempotency_key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'outbox: idempotency_key must be 1 to 200 characters without control characters (it travels as a header)'
            USING ERRCODE = 'check_violation', COLUMN = 'idempotency_key';
    END IF;
    IF length(NEW.key) > 1000 OR NEW.key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'outbox: key must be at most 1000 characters without control characters'
            USING ERRCODE = 'check_violation', COLUMN = 'key';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER messages_guard BEFORE INSERT ON {{.schema}}.messages
    FOR EACH ROW EXECUTE FUNCTION {{.schema}}.messages_guard();
