-- A row's id, its created_at and the size of its headers are the
-- database's to decide, whatever the inserting role may write.
--
-- An identity column takes the value an insert gives it with OVERRIDING
-- SYSTEM VALUE, which every role with INSERT on the column may write (the
-- table's owner always): a producer could give a row the id of a dead letter
-- (the settle of its whole batch then failed on dead_letters' primary key)
-- or the sequence's next ids (every other producer's insert then failed on
-- messages' primary key). The column becomes a plain bigint whose value the
-- insert guard always takes from the sequence, so an id written by an
-- insert is replaced. The sequence carries on past every id already used by
-- a pending row or a dead letter. A session that skips triggers
-- (session_replication_role = replica: replication, restores) writes the
-- id itself, as it writes every other column.
CREATE SEQUENCE {{.schema}}.messages_id AS bigint;

SELECT setval('{{.schema}}.messages_id',
              greatest(CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END,
                       (SELECT max(id) FROM {{.schema}}.messages),
                       (SELECT max(id) FROM {{.schema}}.dead_letters),
                       0) + 1,
              false)
  FROM {{.schema}}.messages_id_seq AS s;

ALTER TABLE {{.schema}}.messages ALTER COLUMN id DROP IDENTITY;
ALTER SEQUENCE {{.schema}}.messages_id RENAME TO messages_id_seq;
ALTER SEQUENCE {{.schema}}.messages_id_seq OWNED BY {{.schema}}.messages.id;

COMMENT ON COLUMN {{.schema}}.messages.id IS
    'Owned by the database: the insert guard sets it from messages_id_seq, whatever the insert wrote.';

-- The guard runs as the schema's owner (SECURITY DEFINER) so that it may
-- take the sequence's next value for producers that have no grant on it;
-- it reads no table. It already ran with its own search_path, which costs
-- the same call path. It now also:
--   - sets created_at to the insert's time for every insert: a time in the
--     past skewed the delivery latency histogram and ce-time (the relay's
--     own commands, which kept a dead letter's created_at when they put it
--     back, now give it the time it was put back, as replay did);
--   - refuses headers over 16 KiB (their JSON text): every sink sends them
--     as protocol headers, and HTTP servers commonly refuse requests whose
--     headers pass 8 to 16 KiB (Node.js 16 KiB, nginx 8 KiB a line),
--     RabbitMQ closes the connection of a message whose properties pass its
--     frame (128 KiB), NATS counts them in max_payload. A producer learns it
--     in its own transaction rather than from a dead letter.
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
