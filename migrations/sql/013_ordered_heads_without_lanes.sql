-- Ordered mode without lanes (issue 21).
--
-- Ordered mode kept one row per key with pending rows (the lanes table),
-- moved by every claim and every settle of the key's head. While another
-- session pins the MVCC horizon, every move leaves a dead version whose
-- entries no snapshot releases, and each lookup of a lane by its key (the
-- claim's move, the settle's, the producers' trigger) walks every version
-- of that lane: one settle of 82 heads read 33,000 buffers after three
-- minutes of a pin, and the relay fell behind. No floor bounds them: they
-- all belong to one key.
--
-- The lanes are gone. A keyed row is a candidate until a claim finds an
-- older row of its key; the claim then marks it waiting, which takes it
-- out of messages_heads_due_idx, the index ordered claims walk, so that no
-- claim walks it again while the rows before it are in flight. The settle
-- that deletes the older row (delivered or dead-lettered) makes the key's
-- oldest row a candidate again, in a statement of its own after the delete
-- (relay/sql_heads.go says why). A key is then claimed only through its
-- oldest row, and the rows a claim walks are the candidates, not the rows
-- queued behind heads in flight. Nothing is moved per delivered row but
-- the rows themselves, whose dead entries the claim floor and the id floor
-- keep off the claims' path.
--
-- waiting belongs to the relay: the insert guard clears it, so that no
-- producer can set it. The two indexes exist only in ordered mode
-- (messages_apply_mode): messages_heads_due_idx for the claims,
-- messages_waiting_idx for the gauge of rows waiting on their key and the
-- repair of a key whose oldest row waits behind nothing (an older row
-- deleted by hand).
ALTER TABLE {{.schema}}.messages ADD COLUMN waiting boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN {{.schema}}.messages.waiting IS
    'Ordered mode: the row waits behind an older row of its key (set by the relay; producers leave it alone).';

-- The insert guard of migration 12, which now also clears waiting.
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
    NEW.waiting := false;
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

-- The mode's indexes: the due index of candidates and the index of waiting
-- rows in ordered mode, the bucket index in partitioned mode. No trigger
-- depends on the mode any more.
CREATE OR REPLACE FUNCTION {{.schema}}.messages_apply_mode() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    mode text := (SELECT r.mode FROM {{.schema}}.relay_mode AS r);
    bucketed boolean := to_regclass('{{.schema}}.messages_bucket_due_idx') IS NOT NULL;
    headed boolean := to_regclass('{{.schema}}.messages_heads_due_idx') IS NOT NULL;
    waited boolean := to_regclass('{{.schema}}.messages_waiting_idx') IS NOT NULL;
BEGIN
    IF mode = 'ordered' THEN
        IF NOT headed THEN
            CREATE INDEX messages_heads_due_idx ON {{.schema}}.messages (available_at, id)
                WHERE key IS NOT NULL AND NOT waiting;
        END IF;
        IF NOT waited THEN
            CREATE INDEX messages_waiting_idx ON {{.schema}}.messages (key, id) WHERE waiting;
        END IF;
    ELSE
        DROP INDEX IF EXISTS {{.schema}}.messages_heads_due_idx;
        DROP INDEX IF EXISTS {{.schema}}.messages_waiting_idx;
    END IF;
    IF mode = 'partitioned' AND NOT bucketed THEN
        CREATE INDEX messages_bucket_due_idx ON {{.schema}}.messages ({{.schema}}.messages_bucket(key, id), available_at, id)
            WHERE {{.schema}}.messages_bucket(key, id) BETWEEN 0 AND 63;
    ELSIF bucketed AND mode <> 'partitioned' THEN
        DROP INDEX {{.schema}}.messages_bucket_due_idx;
    END IF;
END
$$;

REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_apply_mode() FROM PUBLIC;

DROP TRIGGER messages_open_lanes ON {{.schema}}.messages;
DROP FUNCTION {{.schema}}.messages_open_lanes();
DROP FUNCTION {{.schema}}.lanes_prune(text[]);
DROP TABLE {{.schema}}.lanes;

-- A schema in ordered mode gets its indexes now (in this transaction:
-- producers' inserts wait while they build). Its pending rows are all
-- candidates: the claims mark those behind an older row of their key.
SELECT {{.schema}}.messages_apply_mode();
