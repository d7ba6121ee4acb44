-- The archive and the dead letters are indexed by ordering key, as the hot
-- table is (messages_key_idx), for the console's key history: "what
-- happened to order 42" reads every row of one key in the three tables,
-- newest first (relay/admin, KeyHistory). Without an index it reads the
-- whole archive for a key that has a handful of rows: 5 million rows for
-- an outbox that delivers 8 rows a second over the week of
-- RELAY_ARCHIVE_RETENTION's default. With one it reads the key's entries,
-- from the newest, and stops at the history's limit.
--
-- Both indexes are partial, as messages_key_idx: only keyed rows pay an
-- index entry when they are archived (the settle's insert) or
-- dead-lettered; rows without a key cost what they cost before. id follows
-- key so that a key's rows come in id order, newest first from the end.
--
-- CREATE INDEX holds a SHARE lock on the table while it reads it, and tern
-- runs a migration in a transaction, where CONCURRENTLY is not allowed: on
-- a large archive the relays' settles, which insert into it, wait until
-- the index is built and the migration commits, and the deliveries they
-- settle wait with them
-- (2.8 s for 5 million archived rows, half of them keyed, 1.8 GB read from
-- the cache on a test machine; longer when the archive must be read from
-- disk). The dead letters' index is built the same way, and makes the
-- relays wait to dead-letter a row meanwhile. Apply this migration at a
-- quiet hour, or shorten the archive's retention first.
CREATE INDEX archive_key_idx ON {{.schema}}.archive (key, id) WHERE key IS NOT NULL;

CREATE INDEX dead_letters_key_idx ON {{.schema}}.dead_letters (key, id) WHERE key IS NOT NULL;
