-- An idempotency key the insert generated is a fresh random UUID that no
-- delivery can have used: looking it up among the delivered keys can never
-- hit, and recording it can never serve. The relay did both for every row,
-- about a third of PostgreSQL's work per delivered row. dedup says whether
-- the producer chose the key: the claim looks only those keys up, and the
-- settle records only those.
--
-- The guard trigger generates a missing key (it did the column default's
-- job before NOT NULL is checked) and sets dedup; a producer cannot set it.
-- A session that skips triggers (session_replication_role = replica) must
-- give the key itself, and its rows keep dedup = true: looked up, as before.
ALTER TABLE {{.schema}}.messages ADD COLUMN dedup boolean NOT NULL DEFAULT true;
ALTER TABLE {{.schema}}.messages ALTER COLUMN idempotency_key DROP DEFAULT;

COMMENT ON COLUMN {{.schema}}.messages.dedup IS
    'Owned by the relay: false when the insert generated the idempotency key, which no delivery can have used.';

CREATE OR REPLACE FUNCTION {{.schema}}.messages_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.attempts := 0;
    NEW.claim_seq := 0;
    NEW.leased_by := NULL;
    NEW.leased_until := NULL;
    NEW.last_error := NULL;
    NEW.dedup := NEW.idempotency_key IS NOT NULL;
    IF NEW.idempotency_key IS NULL THEN
        NEW.idempotency_key := gen_random_uuid()::text;
    END IF;
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

-- The headers check walks the object once instead of three times (a third
-- less of the insert's cost for it) and keeps its name, which producers see
-- in errors. It also refuses what the old one let through by accident: an
-- array of strings as a header's value (lax mode unwrapped it), which no
-- sink can send and the relay dead-lettered as unreadable.
ALTER DOMAIN {{.schema}}.headers DROP CONSTRAINT headers_must_be_a_json_object_of_strings;
ALTER DOMAIN {{.schema}}.headers ADD CONSTRAINT headers_must_be_a_json_object_of_strings CHECK (
    VALUE IS NULL OR (
        jsonb_typeof(VALUE) = 'object'
        AND NOT jsonb_path_exists(VALUE,
            '$.keyvalue() ? (@.value.type() != "string" || !(@.key like_regex "^[!#$%&''*+.^_`|~0-9A-Za-z-]+$") || @.value like_regex "[\\r\\n]")',
            '{}', true)
    )
) NOT VALID;

-- The relay's gauge of rows waiting for a retry read every row scheduled
-- for later to find the few that had failed: a million rows due tomorrow
-- cost a full pass every stats interval. Failed rows carry last_error,
-- which claims never write (they stay HOT).
CREATE INDEX messages_retry_idx ON {{.schema}}.messages (available_at) WHERE last_error IS NOT NULL;

-- The trigger that opens ordered-mode lanes ran for every inserting
-- statement in every mode (it keeps the statement's rows in a transition
-- table, then looks the mode up): about 40 µs of a single-row insert. It is
-- now enabled only while the schema is in ordered mode. A relay calls
-- messages_apply_mode as it registers (in the transaction that switches
-- the mode, which holds producers out, when it switches it; a no-op when
-- the trigger is already right); it is SECURITY DEFINER because only the
-- table's owner may enable a trigger, and it only ever applies the recorded
-- mode.
CREATE FUNCTION {{.schema}}.messages_apply_mode() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ordered boolean := (SELECT mode FROM {{.schema}}.relay_mode) = 'ordered';
    enabled boolean := (SELECT tgenabled IN ('O', 'A') FROM pg_trigger
                         WHERE tgrelid = '{{.schema}}.messages'::regclass AND tgname = 'messages_open_lanes');
BEGIN
    IF ordered AND NOT enabled THEN
        ALTER TABLE {{.schema}}.messages ENABLE TRIGGER messages_open_lanes;
    ELSIF enabled AND NOT ordered THEN
        ALTER TABLE {{.schema}}.messages DISABLE TRIGGER messages_open_lanes;
    END IF;
END
$$;

REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_apply_mode() FROM PUBLIC;

SELECT {{.schema}}.messages_apply_mode();
