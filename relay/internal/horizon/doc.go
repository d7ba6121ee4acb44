// Package horizon reads what holds back the xmin horizon of the relay's
// database: how old its oldest holders are, for the relay's gauges, and
// who they are, for the operator's status.
//
// # Why it matters
//
// Every delivered row leaves a dead tuple and dead index entries in the
// hot table (messages). VACUUM removes them only once no transaction of
// the database may still see them: while a snapshot older than the delete
// is held open, they pile up on the claims' path and every claim slows
// down, without an error, until it ends.
//
// # What holds it
//
// The horizon is the oldest snapshot (xmin) or transaction id (xid) among:
//
//   - the sessions of the database: a report, a forgotten BEGIN in psql,
//     a REPEATABLE READ transaction left idle (holder "session");
//   - prepared transactions, whoever is connected, until COMMIT PREPARED
//     or ROLLBACK PREPARED (holder "prepared");
//   - replication slots with an xmin (a standby's hot_standby_feedback),
//     and walsenders without a slot, which belong to no database (holder
//     "replication"). A logical slot's catalog_xmin holds back the system
//     catalogs only, not the relay's tables, and is left out.
//
// The reading backend itself (its own statement's snapshot) and autovacuum
// workers, whose VACUUM the horizon ignores, are left out too. Backends of
// other databases do not hold this one's horizon, except walsenders.
//
// # What PostgreSQL shows
//
// PostgreSQL shows every session's backend_xmin and backend_xid, so the
// age in transactions is known for every holder. When a transaction
// started (xact_start), and with it the age in seconds, it shows only for
// the reader's own role's sessions, unless the reader has the privileges
// of pg_read_all_stats; a replication slot has an xmin and no start at
// all (TimedHolder). A transaction's start bounds its snapshot's age from
// above: a READ COMMITTED transaction that writes nothing takes a new
// snapshot for each statement.
//
// # The readings
//
// A Reader reads the age of the oldest holder of each kind (Holders) and
// reports it through its Hooks, for the relay's gauges
// outbox_relay_oldest_snapshot_age_seconds and
// outbox_relay_oldest_xmin_age_transactions: Refresh reads once, Run every
// Config.Every. The first time it finds that its role cannot see when
// other roles' transactions started, it says so once, at warn.
//
// ReadOldest, and QueueOldest in a batch of the caller's, list the oldest
// holders by name (pid, gid or slot name, user, application, state), with
// whether the reader sees every session: what an operator needs to end
// them.
//
// The statements are in sql.go; their final text is in testdata/*.sql
// (TestGoldenSQL).
package horizon
