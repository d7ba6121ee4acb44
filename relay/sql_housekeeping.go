package relay

// The statements of the relay's housekeeping: retention (retention.go;
// the history's partitions are relay/internal/history's),
// the gauges (stats.go; the xmin horizon is relay/internal/horizon), the autovacuum
// check (autovacuum.go), and the registry of relays and the schema's mode
// (registry.go).

// The gauges' queries run every StatsInterval, however large the backlog:
// counts stop at gaugeCountCap rows (@cap: a gauge reading the cap means
// "at least that many"), and the oldest due row is the first the due index
// yields; both walk the due index from the claim floor (relay/internal/floor). They
// are planned per execution (planPerExecution), as every mode's gauges
// are: the generic plan a prepared statement falls back to after five runs
// took ordered mode's gauge of blocked keys to 357 ms and 22,000 buffers
// under a pinned horizon, against 0.1 ms planned for its arguments.

// queryMessagesBacklog counts the due rows per sink (@default_sink names
// the default sink), up to @cap rows.
const queryMessagesBacklog = `
SELECT coalesce(destination, @default_sink), count(*)
  FROM (SELECT destination FROM {schema}.messages_all
         WHERE available_at <= now() AND available_at >= @floor::timestamptz
           AND ` + leaseOver + `
         LIMIT @cap) AS due
 GROUP BY 1`

// queryTableHealth reads, in one round trip: the rows waiting for a retry
// after a failure (through messages_retry_idx, never the rows scheduled for
// later) and the dead letters (each up to @cap), how long the oldest due
// row has waited, the hot table's dead tuples (vacuum falling behind) and
// the lock requests waiting on it now (claims, producers and vacuum
// contending). The rows are read through messages_all, every generation
// of the hot table (migration 24); the dead tuples and the lock requests
// are those of every generation's table (message_generations); last, the
// database's clock, against which the modes' oldest due rows are aged.
// @schema_name is the plain schema name.
const queryTableHealth = `
SELECT (SELECT count(*) FROM (SELECT 1 FROM {schema}.messages_all
                               WHERE last_error IS NOT NULL AND available_at > now()
                                 AND leased_by IS NULL AND attempts > 0
                               LIMIT @cap) AS b),
       coalesce(extract(epoch FROM now() - (
           SELECT min(available_at) FROM {schema}.messages_all
            WHERE available_at <= now() AND available_at >= @floor::timestamptz
              AND ` + leaseOver + `)), 0)::float8,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.dead_letters LIMIT @cap) AS d),
       coalesce((SELECT sum(n_dead_tup) FROM pg_catalog.pg_stat_user_tables
                  WHERE schemaname = @schema_name AND relid IN (SELECT relid FROM {schema}.message_generations)), 0)::bigint,
       (SELECT count(*) FROM pg_catalog.pg_locks
         WHERE NOT granted AND relation IN (SELECT relid FROM {schema}.message_generations)),
       now()`

// queryAutovacuum reads whether the server runs autovacuum and whether the
// hot table of schema @schema_name allows it (reloptions
// autovacuum_enabled): every generation's table (message_generations,
// migration 24) must, since each holds rows in its turn.
const queryAutovacuum = `
SELECT current_setting('autovacuum')::bool,
       coalesce((SELECT bool_and(option_value::bool)
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,
                        pg_catalog.pg_options_to_table(c.reloptions)
                  WHERE n.nspname = @schema_name AND c.oid IN (SELECT relid FROM {schema}.message_generations)
                    AND option_name = 'autovacuum_enabled'), true)`

// The registry of relays and the schema's mode (registry.go). The mode is
// decided under a transaction-level advisory lock (@lock_name names the
// schema), so relays starting together decide one after the other.

// A relay frozen while it registers (SIGSTOP, a VM pause) would hold the
// lock, and during a switch the table lock that holds producers back, until
// its connection died: the server ends the session after 5 seconds idle in
// the transaction.
const queryModeLock = `
SELECT set_config('idle_in_transaction_session_timeout', '5000', true), pg_advisory_xact_lock(hashtext(@lock_name))`

// queryModeRead returns the schema's recorded mode and the relays seen
// within @alive other than @relay_id whose mode is not @mode, with their
// modes.
const queryModeRead = `
SELECT (SELECT mode FROM {schema}.relay_mode),
       coalesce((SELECT array_agg(id || ' (' || mode || ')' ORDER BY id) FROM {schema}.relays
                  WHERE id <> @relay_id AND last_seen > now() - @alive::interval AND mode <> @mode), '{}')`

// queryModeSwitch records @mode as the schema's mode, switched by relay
// @relay_id.
const queryModeSwitch = `
UPDATE {schema}.relay_mode SET mode = @mode, changed_at = now(), changed_by = @relay_id`

// queryModeApply enables the insert triggers and indexes of the mode
// recorded in the transaction, and disables the others
// (messages_apply_mode in the migrations).
const queryModeApply = `
SELECT {schema}.messages_apply_mode()`

// queryModeSwitchLock keeps producers out of the messages table while the
// mode switches: it waits for every transaction that is inserting to commit
// and holds new inserts until the switch commits, so that each row is either
// seen by the switch or written after it, when the producer's triggers
// follow the new mode. It locks messages_all, which locks every
// generation's table with it (the current one, messages, among them). It
// gives up after lock_timeout.
const queryModeSwitchLock = `
SET LOCAL lock_timeout = '10s'; LOCK TABLE {schema}.messages_all IN SHARE MODE`

// queryRelaysHeartbeat registers relay @relay_id (@version, @mode, wanting
// NOTIFY wake-ups: @notify, delivering rows without a destination to
// @default_sink and others to @sinks) or records that it is alive, and
// returns the schema's mode.
const queryRelaysHeartbeat = `
WITH seen AS (
    INSERT INTO {schema}.relays (id, version, mode, notify, default_sink, sinks, claim_floor_lag)
    VALUES (@relay_id, @version, @mode, @notify, @default_sink, @sinks::text[], @claim_floor_lag::double precision)
    ON CONFLICT (id) DO UPDATE SET version = excluded.version, mode = excluded.mode, notify = excluded.notify,
                                   default_sink = excluded.default_sink, sinks = excluded.sinks,
                                   claim_floor_lag = excluded.claim_floor_lag, last_seen = now()
)
SELECT mode FROM {schema}.relay_mode`

// queryRelaysSinks returns the relays seen within @alive other than
// @relay_id that recorded their sinks: their ids, default sinks and sinks.
const queryRelaysSinks = `
SELECT id, default_sink, sinks FROM {schema}.relays
 WHERE id <> @relay_id AND last_seen > now() - @alive::interval AND default_sink IS NOT NULL
 ORDER BY id`

// queryRelaysRestart marks relay @relay_id as started now (its row may be
// left from an earlier process with the same id).
const queryRelaysRestart = `
UPDATE {schema}.relays SET started_at = now() WHERE id = @relay_id`

// queryRelaysLeave removes relay @relay_id from the registry at a clean
// shutdown.
const queryRelaysLeave = `
DELETE FROM {schema}.relays WHERE id = @relay_id`

// queryRelaysForget removes relays not seen for @gone.
const queryRelaysForget = `
DELETE FROM {schema}.relays WHERE last_seen < now() - @gone::interval`
