-- The due indexes serve only the statements that bound available_at.
--
-- messages_due_idx (available_at, id), and messages_bucket_due_idx in
-- partitioned mode, hold id as a column, so PostgreSQL may answer a lookup
-- by id (the claim's update, every settle: id = ANY (...)) by reading the
-- whole due index with id as a filter instead of probing the primary key.
-- It does when its statistics say the table holds few rows: ANALYZE counts
-- live rows, but the index holds an entry for every row version no snapshot
-- has released, and while another session pins the MVCC horizon that is
-- every row delivered since (issue 21). Such a settle read 38,000 buffers
-- and took 1.3 s to archive 417 rows; the claims' updates did the same, and
-- the relay fell behind until the next ANALYZE changed the estimate, about
-- once a minute.
--
-- A partial index is considered only for statements whose conditions imply
-- its predicate. available_at is NOT NULL, so the predicate below leaves
-- every row in the index and every claim, floor and gauge (each bounds
-- available_at with a strict comparison) uses it as before; a lookup by id
-- alone no longer can, and goes through the primary key.
DROP INDEX {{.schema}}.messages_due_idx;
CREATE INDEX messages_due_idx ON {{.schema}}.messages (available_at, id) WHERE available_at IS NOT NULL;

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
        CREATE INDEX messages_bucket_due_idx ON {{.schema}}.messages ({{.schema}}.messages_bucket(key, id), available_at, id)
            WHERE available_at IS NOT NULL;
    ELSIF indexed AND mode <> 'partitioned' THEN
        DROP INDEX {{.schema}}.messages_bucket_due_idx;
    END IF;
END
$$;

REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_apply_mode() FROM PUBLIC;

-- A schema in partitioned mode gets its bucket index again, partial.
DO $$
BEGIN
    IF to_regclass('{{.schema}}.messages_bucket_due_idx') IS NOT NULL THEN
        DROP INDEX {{.schema}}.messages_bucket_due_idx;
        CREATE INDEX messages_bucket_due_idx ON {{.schema}}.messages ({{.schema}}.messages_bucket(key, id), available_at, id)
            WHERE available_at IS NOT NULL;
    END IF;
END
$$;
