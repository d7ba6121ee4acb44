-- messages_unkeyed_due_idx exists only in ordered mode (issue 21).
--
-- Only ordered mode's claim of rows without a key (and its floor) walks
-- this index; the other modes claim through messages_due_idx or the
-- bucket index. Yet every row without a key got an entry in it, in every
-- mode: one of the four index entries an unordered insert wrote, 3-4% of
-- the PostgreSQL time of a producer's ten-row insert with headers
-- (pg_stat_statements, PostgreSQL 15: 215 against 223 microseconds, mean
-- of six runs of 2,000), and one more dead entry per delivered row for
-- vacuum to remove, which a pinned horizon keeps. messages_apply_mode now builds it with ordered
-- mode's other indexes and drops it in the other modes.
CREATE OR REPLACE FUNCTION {{.schema}}.messages_apply_mode() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    mode text := (SELECT r.mode FROM {{.schema}}.relay_mode AS r);
    bucketed boolean := to_regclass('{{.schema}}.messages_bucket_due_idx') IS NOT NULL;
    headed boolean := to_regclass('{{.schema}}.messages_heads_due_idx') IS NOT NULL;
    waited boolean := to_regclass('{{.schema}}.messages_waiting_idx') IS NOT NULL;
    unkeyed boolean := to_regclass('{{.schema}}.messages_unkeyed_due_idx') IS NOT NULL;
BEGIN
    IF mode = 'ordered' THEN
        IF NOT headed THEN
            CREATE INDEX messages_heads_due_idx ON {{.schema}}.messages (available_at, id)
                WHERE key IS NOT NULL AND NOT waiting;
        END IF;
        IF NOT waited THEN
            CREATE INDEX messages_waiting_idx ON {{.schema}}.messages (key, id) WHERE waiting;
        END IF;
        IF NOT unkeyed THEN
            CREATE INDEX messages_unkeyed_due_idx ON {{.schema}}.messages (available_at, id) WHERE key IS NULL;
        END IF;
    ELSE
        DROP INDEX IF EXISTS {{.schema}}.messages_heads_due_idx;
        DROP INDEX IF EXISTS {{.schema}}.messages_waiting_idx;
        DROP INDEX IF EXISTS {{.schema}}.messages_unkeyed_due_idx;
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

-- A schema in another mode than ordered loses the index now (in this
-- transaction: producers' inserts wait while it is dropped).
SELECT {{.schema}}.messages_apply_mode();
