-- Migration 021's cutoffs, validated: one scan of each table under SHARE
-- UPDATE EXCLUSIVE, which the relay's settles and retention do not wait
-- for. Migration 023 attaches the tables as partitions without a scan.
ALTER TABLE {{.schema}}.archive VALIDATE CONSTRAINT archive_before_partitions;
ALTER TABLE {{.schema}}.delivered_keys VALIDATE CONSTRAINT delivered_keys_before_partitions;
