-- outbox-relay: least-privilege grants for the three roles that use the
-- relay's schema. Run it as the schema's owner (the role that ran
-- `outbox-relay migrate`) after the migrations, and again after every
-- upgrade (GRANT is idempotent), with psql:
--
--   psql "$OWNER_DATABASE_URL" -v ON_ERROR_STOP=1 -v schema=outbox \
--        -v producer=app -v relay=outbox_relay -v operator=outbox_operator \
--        -f migrations/least_privilege.sql
--
-- The roles must exist (CREATE ROLE … LOGIN, no other attribute). Unset
-- variables default to outbox, outbox_producer, outbox_relay and
-- outbox_operator.
\if :{?schema}
\else
\set schema outbox
\endif
\if :{?producer}
\else
\set producer outbox_producer
\endif
\if :{?relay}
\else
\set relay outbox_relay
\endif
\if :{?operator}
\else
\set operator outbox_operator
\endif

BEGIN;

-- Producers (your application) insert rows and do nothing else: they cannot
-- read, change or delete pending rows, nor see what was delivered. They may
-- write the columns of the insert contract and no other (the relay's
-- columns, id and created_at are the database's: the insert guard sets them
-- whatever an insert writes, and this grant refuses them outright; the
-- REVOKE takes back the whole-table grant of earlier versions). The insert
-- guard, which takes the id from the sequence, and the trigger that sends
-- the RELAY_NOTIFY wake-up are SECURITY DEFINER: producers need no grant on
-- the sequence or the relays. INSERT … ON CONFLICT (idempotency_key) DO NOTHING reads the key's
-- column, hence SELECT on that one column (add id to it for INSERT …
-- RETURNING id).
GRANT USAGE ON SCHEMA :"schema" TO :"producer";
REVOKE INSERT ON :"schema".messages FROM :"producer";
GRANT INSERT (topic, payload, key, headers, idempotency_key, destination, available_at)
    ON :"schema".messages TO :"producer";
GRANT SELECT (idempotency_key) ON :"schema".messages TO :"producer";
-- (messages is the hot table's current generation: when the relay rotates
-- it, these grants move to the next one, relay/internal/rotation.)

-- The relay, run with RELAY_MIGRATE=false: what its statements (relay/sql.go)
-- read and write, and no DDL. It claims and settles rows (FOR UPDATE and the
-- LOCK of a mode switch need UPDATE), archives them, records delivered keys,
-- dead-letters, registers itself, keeps the mode and the partitioned-mode
-- buckets, shares the gauges' counts, drops expired partitions of the archive and the delivered keys
-- and deletes their expired rows, and
-- checks the schema's version.
GRANT USAGE ON SCHEMA :"schema" TO :"relay";
GRANT SELECT ON :"schema".schema_version TO :"relay";
GRANT SELECT, UPDATE, DELETE ON :"schema".messages_all TO :"relay";
GRANT SELECT ON :"schema".message_generations TO :"relay";
GRANT SELECT, INSERT, DELETE ON :"schema".archive TO :"relay";
GRANT SELECT, INSERT, DELETE ON :"schema".delivered_keys TO :"relay";
GRANT SELECT, INSERT ON :"schema".dead_letters TO :"relay";
GRANT SELECT, UPDATE ON :"schema".relay_mode TO :"relay";
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".relays TO :"relay";
GRANT SELECT, UPDATE ON :"schema".buckets TO :"relay";
GRANT SELECT, UPDATE ON :"schema".gauge_readings TO :"relay";
GRANT EXECUTE ON FUNCTION :"schema".messages_apply_mode() TO :"relay";
-- Adds and drops the partitions of the archive and the delivered keys
-- (relay/internal/history), as the schema's owner.
GRANT EXECUTE ON FUNCTION :"schema".history_maintain(text, timestamptz, interval, interval, interval) TO :"relay";
-- Rotates the hot table's generations (relay/internal/rotation), as the
-- schema's owner: carries waiting rows forward, truncates a drained
-- generation, renames the spare to messages, analyzes the new one.
GRANT EXECUTE ON FUNCTION :"schema".messages_carry(integer, interval, interval) TO :"relay";
GRANT EXECUTE ON FUNCTION :"schema".messages_empty(interval) TO :"relay";
GRANT EXECUTE ON FUNCTION :"schema".messages_rotate(interval, interval) TO :"relay";
GRANT EXECUTE ON FUNCTION :"schema".messages_analyze(bigint) TO :"relay";
-- A failed row whose id was a dead letter's already is dead-lettered under
-- the sequence's next id (relay/sql.go, queryMessagesSettle).
GRANT USAGE ON SEQUENCE :"schema".messages_id_seq TO :"relay";

-- The operator, for `outbox-relay status`, `dead list|retry|purge`, `replay`
-- and `cancel` (relay/admin/sql.go): it reads every table, puts dead
-- letters and archived rows back into messages, forgets the delivered keys
-- of replayed rows, cancels pending rows into the dead letters (FOR UPDATE
-- needs UPDATE) and, in ordered mode, makes the next row of their keys a
-- candidate.
GRANT USAGE ON SCHEMA :"schema" TO :"operator";
GRANT SELECT ON :"schema".schema_version TO :"operator";
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".messages TO :"operator";
GRANT SELECT, UPDATE, DELETE ON :"schema".messages_all TO :"operator";
GRANT SELECT ON :"schema".message_generations TO :"operator";
GRANT SELECT ON :"schema".archive TO :"operator";
GRANT SELECT, DELETE ON :"schema".delivered_keys TO :"operator";
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".dead_letters TO :"operator";
GRANT SELECT ON :"schema".relay_mode TO :"operator";
GRANT SELECT ON :"schema".relays TO :"operator";
GRANT SELECT ON :"schema".buckets TO :"operator";
GRANT SELECT ON :"schema".gauge_readings TO :"operator";

-- Not granted here: pg_read_all_stats. PostgreSQL shows every role when a
-- session's snapshot was taken (backend_xmin), but when its transaction
-- started only to the session's own role and to pg_read_all_stats: without
-- it, outbox_relay_oldest_snapshot_age_seconds and `outbox-relay status`
-- time only their own role's sessions (the relay warns once at start), and
-- OutboxRelaySnapshotPinned misses a report or a forgotten BEGIN of another
-- role. The role also shows every session's query text and every
-- statistics view, and only a superuser (or a role holding it WITH ADMIN
-- OPTION) may grant it, not the schema's owner: a DBA who wants the
-- snapshot ages grants it apart (docs/security.md):
--
--   GRANT pg_read_all_stats TO outbox_relay, outbox_operator;

COMMIT;
