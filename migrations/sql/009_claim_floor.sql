-- The claim floor (relay/floor.go): claims start at a time below which no
-- row can be, rather than at the oldest entry of the due index, so that the
-- dead entries of the rows delivered before it stay off the claim's path
-- while another session's snapshot keeps them from being removed (a pinned
-- MVCC horizon: a report, a long migration, a BEGIN left open in psql).
--
-- The floor rests on one rule, which the guards below keep for every
-- statement whose triggers run: a row version's available_at is never
-- earlier than the time its writing transaction had an id, unless the
-- version before it was already that early. A relay that took a snapshot
-- (pg_current_snapshot()) at time t then knows that every row it cannot see
-- yet is due no earlier than t, or than the time it first saw the writing
-- transaction in progress; the floor never passes those times while such a
-- writer is young, and goes back to them when an older one commits late. A
-- row whose available_at the insert leaves earlier (the column default,
-- now(), is the transaction's start) becomes due at the insert's time
-- instead, which changes nothing for a row that was due at once.
--
-- An update that moves available_at earlier (an operator's "send it now")
-- gets the same treatment from a second guard, which runs only for such
-- updates (its WHEN clause is evaluated without calling it), so the relay's
-- claims and settles, which never move a row earlier, do not pay for it.
-- Sessions that skip triggers (session_replication_role = replica) may
-- break the rule: a relay rescans from the oldest row every minute, so such
-- a row waits a minute at most.
CREATE OR REPLACE FUNCTION {{.schema}}.messages_guard() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
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
    -- The transaction's id first, then the clock: a row is never due
    -- before the time its transaction had an id (the claim floor's rule).
    PERFORM pg_current_xact_id();
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

CREATE FUNCTION {{.schema}}.messages_guard_earlier() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_current_xact_id();
    NEW.available_at := greatest(NEW.available_at, clock_timestamp());
    RETURN NEW;
END
$$;

CREATE TRIGGER messages_guard_earlier BEFORE UPDATE OF available_at ON {{.schema}}.messages
    FOR EACH ROW WHEN (NEW.available_at < OLD.available_at)
    EXECUTE FUNCTION {{.schema}}.messages_guard_earlier();
