-- The id floor (relay/floor.go): a lower bound on the id of every row that
-- is pending or may still become visible, which the lookups of a key's
-- oldest row start from (partitioned mode's check that no older row of a
-- key is pending, its held keys' heads, ordered mode's lane heads), so that
-- the dead entries of a key's delivered rows stay off their path while a
-- pinned horizon keeps them. Without it each lookup walked every row of its
-- key delivered since the snapshot began.
--
-- The floor rests on one rule, which the insert guard now keeps: a
-- transaction takes its id before any row id. A relay that reads the
-- sequence and then takes a transaction id (its mark) then knows that every
-- transaction whose id is above the mark inserts rows with ids above what it
-- read. Until now the guard took the row's id first. A trigger call that
-- began under the old text finishes under it; a relay's first refresh
-- assumes nothing of the transactions in progress then, so only a call
-- that had taken its row id and not yet its transaction id when a relay of
-- this version refreshed twice could break the rule.
CREATE OR REPLACE FUNCTION {{.schema}}.messages_guard() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- The transaction's id before the row's: a transaction whose id is
    -- above a floor refresh's mark takes row ids above the sequence's value
    -- that refresh read (the id floor's rule).
    PERFORM pg_current_xact_id();
    NEW.id := nextval('{{.schema}}.messages_id_seq');
    NEW.created_at := now();
    NEW.attempts := 0;
    NEW.claim_seq := 0;
    NEW.leased_by := NULL;
    NEW.leased_until := NULL;
    NEW.last_error := NULL;
    NEW.dedup := NEW.idempotency_key IS NOT NULL;
    IF NEW.idempotency_key IS NULL THEN
        NEW.idempotency_key := gen_random_uuid()::text;
    END IF;
    IF NOT isfinite(NEW.available_at) THEN
        RAISE EXCEPTION 'outbox: available_at must be a finite time, not %', NEW.available_at
            USING ERRCODE = 'check_violation', COLUMN = 'available_at';
    END IF;
    -- The transaction's id first (above), then the clock: a row is never
    -- due before the time its transaction had an id (the claim floor's rule).
    NEW.available_at := greatest(NEW.available_at, clock_timestamp());
    IF length(NEW.idempotency_key) > 200 OR NEW.idempotency_key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'outbox: idempotency_key must be 1 to 200 characters without control characters (it travels as a header)'
            USING ERRCODE = 'check_violation', COLUMN = 'idempotency_key';
    END IF;
    IF length(NEW.key) > 1000 OR NEW.key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'outbox: key must be at most 1000 characters without control characters'
            USING ERRCODE = 'check_violation', COLUMN = 'key';
    END IF;
    IF NEW.headers IS NOT NULL AND octet_length(NEW.headers::text) > 16384 THEN
        RAISE EXCEPTION 'outbox: headers must be at most 16384 bytes of JSON, not %', octet_length(NEW.headers::text)
            USING ERRCODE = 'check_violation', COLUMN = 'headers';
    END IF;
    RETURN NEW;
END
$$;
