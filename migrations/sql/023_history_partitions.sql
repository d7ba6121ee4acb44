-- The archive and the delivered keys become tables partitioned by
-- delivered_at (migrations 021 and 022 prepared them). Each table is
-- renamed <table>_before_partitions and attached, from the beginning of
-- time to migration 021's cutoff, as the first partition of a partitioned
-- table of its old name, without a scan (the validated constraint implies
-- the bounds). The relay's statements name the partitioned tables, so
-- they read and write as before.
--
-- From the cutoff on, the relay adds the partitions ahead of time and
-- drops whole partitions past their retention (history_maintain, below;
-- relay/internal/history has the protocol). The first partition's expired
-- rows are still deleted in chunks until the whole of it is past retention
-- and it is dropped too.
DO $$
DECLARE
    t text;
    legacy text;
    cutoff timestamptz;
    g record;
BEGIN
    FOREACH t IN ARRAY ARRAY['archive', 'delivered_keys'] LOOP
        legacy := t || '_before_partitions';
        SELECT (regexp_match(pg_get_constraintdef(c.oid), '''([^'']+)'''))[1]::timestamptz INTO STRICT cutoff
          FROM pg_constraint AS c
         WHERE c.conrelid = format('{{.schema}}.%I', t)::regclass AND c.conname = t || '_before_partitions';
        EXECUTE format('ALTER TABLE {{.schema}}.%I RENAME TO %I', t, legacy);
        EXECUTE format('CREATE TABLE {{.schema}}.%I (LIKE {{.schema}}.%I INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE (delivered_at)', t, legacy);
        EXECUTE format('ALTER TABLE {{.schema}}.%I ATTACH PARTITION {{.schema}}.%I FOR VALUES FROM (MINVALUE) TO (%L)', t, legacy, cutoff);
        -- Whoever was granted the table is granted the partitioned table:
        -- statements through it are checked against its privileges alone.
        FOR g IN SELECT a.privilege_type, a.grantee, a.is_grantable
                   FROM pg_class AS c, aclexplode(c.relacl) AS a
                  WHERE c.oid = format('{{.schema}}.%I', legacy)::regclass AND a.grantee <> c.relowner LOOP
            EXECUTE format('GRANT %s ON {{.schema}}.%I TO %s%s', g.privilege_type, t,
                           CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
                           CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$$;

-- The indexes, on the partitioned tables: each adopts the first
-- partition's index of the same definition (renamed out of the way)
-- instead of building one, and every later partition gets its own.
ALTER INDEX {{.schema}}.archive_key_idx RENAME TO archive_before_partitions_key_idx;
ALTER INDEX {{.schema}}.archive_delivered_at_idx RENAME TO archive_before_partitions_delivered_at_idx;
ALTER INDEX {{.schema}}.delivered_keys_idempotency_key_idx RENAME TO delivered_keys_before_partitions_idempotency_key_idx;
ALTER INDEX {{.schema}}.delivered_keys_delivered_at_idx RENAME TO delivered_keys_before_partitions_delivered_at_idx;
CREATE INDEX archive_key_idx ON {{.schema}}.archive (key, id) WHERE key IS NOT NULL;
CREATE INDEX archive_delivered_at_idx ON {{.schema}}.archive USING brin (delivered_at) WITH (autosummarize = on);
CREATE INDEX delivered_keys_idempotency_key_idx ON {{.schema}}.delivered_keys USING hash (idempotency_key);
CREATE INDEX delivered_keys_delivered_at_idx ON {{.schema}}.delivered_keys USING brin (delivered_at) WITH (autosummarize = on);

-- history_partitions lists the partitions of the archive or the delivered
-- keys (@tbl) with their bounds: -infinity for the first partition's
-- lower bound (MINVALUE).
CREATE FUNCTION {{.schema}}.history_partitions(tbl text)
RETURNS TABLE (partition_name name, lower_bound timestamptz, upper_bound timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.relname,
           CASE WHEN b[1] = 'MINVALUE' THEN '-infinity' ELSE btrim(b[1], '''')::timestamptz END,
           CASE WHEN b[2] = 'MAXVALUE' THEN 'infinity' ELSE btrim(b[2], '''')::timestamptz END
      FROM pg_inherits AS i
      JOIN pg_class AS c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS b
     WHERE i.inhparent = format('{{.schema}}.%I', tbl)::regclass
$$;

-- history_maintain keeps the partitions of the archive or the delivered
-- keys (tbl), for a relay whose partitions are width wide and kept for
-- keep (null: forever), at time at:
--
--   1. it counts the rows of the partitions whose upper bound is at or
--      before at - keep, which it will drop (no lock: nothing is archived
--      with a delivered_at that old);
--   2. it drops the newest partitions while they are empty and more than
--      twice width wide, so that a relay keeping rows for minutes does
--      not wait behind an hour-wide partition (migration 23's first one,
--      or a relay's with a longer retention);
--   3. it adds partitions of width from the last one's upper bound (from
--      at - width when that is later: the relay was away) until one ends
--      at least a width past at;
--   4. it drops the partitions counted in 1.
--
-- It returns how many partitions it added and dropped and the rows the
-- dropped ones held. Steps 2 to 4 take an ACCESS EXCLUSIVE lock on the
-- partitioned table, held to the end of the call (a moment: nothing is
-- scanned under it): the call waits at most lock_wait for it and, when it
-- cannot have it, gives up until the next call (busy), so that the relay's
-- claims and settles never wait behind it longer. One call at a time per
-- table (an advisory lock; a second call meanwhile does nothing and is not
-- busy: the first keeps the partitions). It runs as the
-- schema's owner (SECURITY DEFINER): only the owner of a table may add or
-- drop its partitions.
CREATE FUNCTION {{.schema}}.history_maintain(tbl text, at timestamptz, width interval, keep interval, lock_wait interval)
RETURNS TABLE (created integer, dropped integer, dropped_rows bigint, busy boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    last timestamptz;
    lower timestamptz;
    p record;
    n bigint;
    expired name[] := '{}';
    expired_rows bigint := 0;
    filled boolean;
BEGIN
    IF tbl IS NULL OR tbl NOT IN ('archive', 'delivered_keys') THEN
        RAISE EXCEPTION 'history_maintain: % is not archive or delivered_keys', tbl USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF width IS NULL OR width < interval '1 second' THEN
        RAISE EXCEPTION 'history_maintain: width % is under a second', width USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep <= interval '0' THEN
        RAISE EXCEPTION 'history_maintain: keep % is not positive (null keeps every partition)', keep USING ERRCODE = 'invalid_parameter_value';
    END IF;
    created := 0;
    dropped := 0;
    dropped_rows := 0;
    busy := false;
    IF NOT pg_try_advisory_xact_lock(hashtext('outbox-relay history {{.schema}}.' || tbl)) THEN
        RETURN NEXT; -- another relay's call keeps them now
        RETURN;
    END IF;
    -- 1.
    IF keep IS NOT NULL THEN
        FOR p IN SELECT h.partition_name FROM {{.schema}}.history_partitions(tbl) AS h
                  WHERE h.upper_bound <= at - keep LOOP
            EXECUTE format('SELECT count(*) FROM {{.schema}}.%I', p.partition_name) INTO n;
            expired := expired || p.partition_name;
            expired_rows := expired_rows + n;
        END LOOP;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
    BEGIN
        EXECUTE format('LOCK TABLE {{.schema}}.%I IN ACCESS EXCLUSIVE MODE', tbl);
    EXCEPTION WHEN lock_not_available THEN
        busy := true;
        RETURN NEXT;
        RETURN;
    END;
    -- 2.
    FOR p IN SELECT h.partition_name, h.lower_bound, h.upper_bound FROM {{.schema}}.history_partitions(tbl) AS h
              ORDER BY h.upper_bound DESC LOOP
        EXIT WHEN p.lower_bound = '-infinity' OR p.upper_bound - p.lower_bound <= 2 * width
               OR p.upper_bound <= at - keep;
        EXECUTE format('SELECT EXISTS (SELECT FROM {{.schema}}.%I)', p.partition_name) INTO filled;
        EXIT WHEN filled;
        EXECUTE format('DROP TABLE {{.schema}}.%I', p.partition_name);
    END LOOP;
    -- 3.
    SELECT max(h.upper_bound) INTO last FROM {{.schema}}.history_partitions(tbl) AS h;
    WHILE last < at + width LOOP
        lower := greatest(last, at - width);
        EXECUTE format('CREATE TABLE {{.schema}}.%I PARTITION OF {{.schema}}.%I FOR VALUES FROM (%L) TO (%L)',
                       tbl || '_' || to_char(lower AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS'), tbl, lower, lower + width);
        created := created + 1;
        last := lower + width;
    END LOOP;
    -- 4.
    FOR i IN 1 .. coalesce(array_length(expired, 1), 0) LOOP
        EXECUTE format('DROP TABLE IF EXISTS {{.schema}}.%I', expired[i]);
    END LOOP;
    dropped := coalesce(array_length(expired, 1), 0);
    dropped_rows := expired_rows;
    RETURN NEXT;
END
$$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.history_maintain(text, timestamptz, interval, interval, interval) FROM PUBLIC;

-- A first partition from the cutoff on, an hour wide, so that rows
-- archived before a relay of this version first keeps the tables find one
-- (a relay of the version before, during an upgrade: then the cutoff is an
-- hour away and this adds nothing). A relay keeping rows for less drops it
-- while it is empty and adds its own (history_maintain, step 2).
SELECT {{.schema}}.history_maintain(t, now() - interval '1 hour', interval '1 hour', NULL, interval '1 minute')
  FROM unnest(ARRAY['archive', 'delivered_keys']) AS t;
