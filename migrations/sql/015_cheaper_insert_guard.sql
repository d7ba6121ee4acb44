-- The insert guard of migration 13, doing less work per row (issue 21: the
-- insert is most of the PostgreSQL CPU the relay costs beyond a bare loop).
--
-- Counted with callgrind on PostgreSQL 15 (make bench-instructions: instructions
-- per row of one INSERT … SELECT of 10,000 rows with one header): 104,035
-- before, 92,364 after; a bare table without the table contract takes
-- 26,704 (docs/benchmarks.md, "The insert, counted").
--
--   - The transaction's id is taken by an assignment, which plpgsql
--     evaluates as a simple expression, instead of PERFORM, which ran a
--     query through SPI for every row (about 9,000 instructions a row).
--   - A key the guard generates is a UUID: it cannot be too long or hold a
--     control character, so only a key the producer chose is checked (the
--     regular expression was about 7,500 instructions a row).
--
-- What the guard enforces is unchanged: the same columns are set and the
-- same values refused with the same errors; the transaction's id is still
-- taken before the row's id, and both before the clock is read.
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
    IF NEW.headers IS NOT NULL AND octet_length(NEW.headers::text) > 16384 THEN
        RAISE EXCEPTION 'outbox: headers must be at most 16384 bytes of JSON, not %', octet_length(NEW.headers::text)
            USING ERRCODE = 'check_violation', COLUMN = 'headers';
    END IF;
    RETURN NEW;
END
$$;
