-- Rows keep their first delivery error besides their last (issue 41): a
-- dead letter that failed five times shows what went wrong first, which is
-- often the cause, and last, which is often a symptom. The relay sets
-- first_error with the first failure (a requeue's coalesce, in the same
-- update that sets last_error, which is not a HOT update either way since
-- messages_retry_idx's predicate reads last_error) and carries it into the
-- dead letters; null when the row failed once. The insert guard is the
-- guard of migration 16 with first_error reset, like every column the
-- relay owns.
ALTER TABLE {{.schema}}.messages ADD COLUMN first_error text;
ALTER TABLE {{.schema}}.dead_letters ADD COLUMN first_error text;

CREATE OR REPLACE FUNCTION {{.schema}}.messages_guard() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    xact xid8;
BEGIN
    -- The transaction's id before the row's: a transaction whose id is
    -- above a floor refresh's mark takes row ids above the sequence's value
    -- that refresh read (the id floor's rule).
    xact := pg_current_xact_id();
    NEW.id := nextval('{{.schema}}.messages_id_seq');
    NEW.created_at := now();
    NEW.attempts := 0;
    NEW.claim_seq := 0;
    NEW.leased_by := NULL;
    NEW.leased_until := NULL;
    NEW.last_error := NULL;
    NEW.first_error := NULL;
    NEW.waiting := false;
    IF NEW.idempotency_key IS NULL THEN
        NEW.dedup := false;
        NEW.idempotency_key := gen_random_uuid()::text;
    ELSE
        NEW.dedup := true;
        IF length(NEW.idempotency_key) > 200 OR NEW.idempotency_key ~ '[[:cntrl:]]' THEN
            RAISE EXCEPTION 'outbox: idempotency_key must be 1 to 200 characters without control characters (it travels as a header)'
                USING ERRCODE = 'check_violation', COLUMN = 'idempotency_key';
        END IF;
    END IF;
    IF NOT isfinite(NEW.available_at) THEN
        RAISE EXCEPTION 'outbox: available_at must be a finite time, not %', NEW.available_at
            USING ERRCODE = 'check_violation', COLUMN = 'available_at';
    END IF;
    -- The transaction's id first (above), then the clock: a row is never
    -- due before the time its transaction had an id (the claim floor's rule).
    NEW.available_at := greatest(NEW.available_at, clock_timestamp());
    IF length(NEW.key) > 1000 OR NEW.key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'outbox: key must be at most 1000 characters without control characters'
            USING ERRCODE = 'check_violation', COLUMN = 'key';
    END IF;
    IF octet_length(NEW.topic) > 255 THEN
        RAISE EXCEPTION 'outbox: topic must be at most 255 bytes, not %', octet_length(NEW.topic)
            USING ERRCODE = 'check_violation', COLUMN = 'topic';
    END IF;
    IF octet_length(NEW.destination) > 255 THEN
        RAISE EXCEPTION 'outbox: destination must be at most 255 bytes (the name of a sink), not %', octet_length(NEW.destination)
            USING ERRCODE = 'check_violation', COLUMN = 'destination';
    END IF;
    IF NEW.headers IS NOT NULL AND octet_length(NEW.headers::text) > 16384 THEN
        RAISE EXCEPTION 'outbox: headers must be at most 16384 bytes of JSON, not %', octet_length(NEW.headers::text)
            USING ERRCODE = 'check_violation', COLUMN = 'headers';
    END IF;
    RETURN NEW;
END
$$;
