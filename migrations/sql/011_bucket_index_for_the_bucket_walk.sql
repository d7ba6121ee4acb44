-- messages_bucket_due_idx serves the per-bucket claim walk alone (issue 21).
--
-- Migration 10 made both due indexes partial on available_at IS NOT NULL,
-- so that lookups by id cannot walk them. But the bucket walk bounds
-- available_at too, so messages_due_idx (available_at, id) stayed a
-- candidate for it: with the statistics ANALYZE leaves when it saw a nearly
-- empty table, PostgreSQL walked the shared due index once per bucket with
-- the bucket as a filter, 64 times the due rows and, under a pinned
-- horizon, 64 times every dead entry above the claim floor (459,000
-- buffers, 3.5 s per claim; the relay fell behind). Now the bucket index's
-- predicate (the bucket BETWEEN 0 AND 63, true of every row) is stated by
-- the walk alone; a settle's fence (messages_bucket(...) = ANY (...)) does
-- not imply it, so lookups by id still go through the primary key. The walk
-- bounds available_at only inside row comparisons led by the bucket, which
-- do not imply messages_due_idx's predicate.
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
            WHERE {{.schema}}.messages_bucket(key, id) BETWEEN 0 AND 63;
    ELSIF indexed AND mode <> 'partitioned' THEN
        DROP INDEX {{.schema}}.messages_bucket_due_idx;
    END IF;
END
$$;

REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_apply_mode() FROM PUBLIC;

-- A schema in partitioned mode gets its bucket index again, with the new
-- predicate (in this transaction: producers' inserts wait while it builds).
DO $$
BEGIN
    IF to_regclass('{{.schema}}.messages_bucket_due_idx') IS NOT NULL THEN
        DROP INDEX {{.schema}}.messages_bucket_due_idx;
        PERFORM {{.schema}}.messages_apply_mode();
    END IF;
END
$$;
