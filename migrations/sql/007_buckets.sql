-- Partitioned mode (RELAY_MODE=partitioned): a fixed number of logical
-- buckets, each owned by at most one relay at a time, which alone claims and
-- settles the bucket's rows.

-- A row's bucket: of its key when it has one (so that a key's rows share
-- one owner, which keeps their order), else of its id (unkeyed rows spread
-- round robin). Derived from columns the producer writes anyway, so the
-- writer does nothing and cannot choose a bucket. The number of buckets (64)
-- is fixed: changing it would move keys between buckets while their rows
-- are pending, so there is no setting for it. Names are qualified because
-- the function is inlined into the relay's statements and the index.
CREATE FUNCTION {{.schema}}.messages_bucket(key text, id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN key IS NULL THEN pg_catalog.int8and(id, 63)::integer
                ELSE pg_catalog.int4and(pg_catalog.hashtext(key), 63) END
$$;

-- One row per bucket: the relay that owns it, until when, and the epoch, the
-- fencing token. Every acquisition increments epoch; a relay claims and
-- settles a bucket's rows only while this row names it, with the epoch it
-- acquired, and lease_until has not passed (claims only while it outlives a
-- row's lease), so a relay that lost a bucket (paused, cut off) cannot act
-- on it after the handover.
CREATE TABLE {{.schema}}.buckets (
    bucket      smallint    PRIMARY KEY CHECK (bucket BETWEEN 0 AND 63),
    owner       text,
    epoch       bigint      NOT NULL DEFAULT 0,
    lease_until timestamptz NOT NULL DEFAULT '-infinity',
    changed_at  timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

INSERT INTO {{.schema}}.buckets (bucket) SELECT generate_series(0, 63);

-- The insert-path structures of the recorded mode: the trigger that opens
-- lanes in ordered mode, and in partitioned mode the index of the
-- per-bucket claim (bucket, due time). Other modes do not pay for either on
-- every insert. The index is built when a schema switches to partitioned
-- mode (in the switch's transaction, which holds producers out: seconds for
-- a million pending rows) and dropped when it leaves it.
CREATE OR REPLACE FUNCTION {{.schema}}.messages_apply_mode() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    mode text := (SELECT r.mode FROM {{.schema}}.relay_mode AS r);
    enabled boolean := (SELECT tgenabled IN ('O', 'A') FROM pg_trigger
                         WHERE tgrelid = '{{.schema}}.messages'::regclass AND tgname = 'messages_open_lanes');
    indexed boolean := EXISTS (SELECT 1 FROM pg_index
                                WHERE indrelid = '{{.schema}}.messages'::regclass
                                  AND indexrelid = to_regclass('{{.schema}}.messages_bucket_due_idx'));
BEGIN
    IF mode = 'ordered' AND NOT enabled THEN
        ALTER TABLE {{.schema}}.messages ENABLE TRIGGER messages_open_lanes;
    ELSIF enabled AND mode <> 'ordered' THEN
        ALTER TABLE {{.schema}}.messages DISABLE TRIGGER messages_open_lanes;
    END IF;
    IF mode = 'partitioned' AND NOT indexed THEN
        CREATE INDEX messages_bucket_due_idx ON {{.schema}}.messages ({{.schema}}.messages_bucket(key, id), available_at, id);
    ELSIF indexed AND mode <> 'partitioned' THEN
        DROP INDEX {{.schema}}.messages_bucket_due_idx;
    END IF;
END
$$;

REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_apply_mode() FROM PUBLIC;
