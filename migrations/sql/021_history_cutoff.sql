-- The archive and the delivered keys move to partitions by delivered_at
-- (issue 43): retention then drops whole partitions, which needs no vacuum
-- and frees their space at once, where deleting rows leaves dead versions
-- that a pinned MVCC horizon keeps. The move takes three migrations so
-- that no step holds a long lock on a large table:
--
--   021 (this one) adds to each table a constraint, not yet validated,
--       that its rows were delivered before a cutoff: an ACCESS EXCLUSIVE
--       lock for a moment, no scan;
--   022 validates it: a scan under SHARE UPDATE EXCLUSIVE, which lets the
--       relay's settles insert and its retention delete meanwhile;
--   023 renames each table and makes it the first partition, from the
--       beginning of time to the cutoff, of a partitioned table of the
--       old name, which the validated constraint lets PostgreSQL attach
--       without a scan; an ACCESS EXCLUSIVE lock for a moment.
--
-- The cutoff is now for tables that are empty (a new schema), an hour
-- from now otherwise, so that 022 and 023, which `outbox-relay migrate`
-- runs right after this one, come before it: after it a settle would fail
-- the check (its rows retried, not lost) until 023 has run.
DO $$
DECLARE
    cutoff timestamptz := CASE WHEN EXISTS (SELECT FROM {{.schema}}.archive) OR EXISTS (SELECT FROM {{.schema}}.delivered_keys)
                               THEN date_trunc('second', now()) + interval '1 hour' ELSE date_trunc('second', now()) END;
BEGIN
    EXECUTE format('ALTER TABLE {{.schema}}.archive ADD CONSTRAINT archive_before_partitions CHECK (delivered_at < %L) NOT VALID', cutoff);
    EXECUTE format('ALTER TABLE {{.schema}}.delivered_keys ADD CONSTRAINT delivered_keys_before_partitions CHECK (delivered_at < %L) NOT VALID', cutoff);
END
$$;
