package horizon

// The statements of the readings. They name no table of the relay's, so
// they have no {schema} to fill in; arguments are named
// (pgx.StrictNamedArgs). Their final text is in testdata/<name>.sql
// (TestGoldenSQL, Statements).

// holding selects the backends, prepared transactions and replication
// slots holding an xmin or an xid that the horizon of the current database
// honours, with the holder they count as (Holders), the age of their
// transaction in seconds (xact_start: NULL for a walsender, and for the
// sessions of other roles unless the reader has pg_read_all_stats, which
// PostgreSQL hides; backend_xmin and backend_xid it shows to everyone) and
// in transactions. It leaves out the reading backend (its own statement's
// snapshot) and autovacuum workers, whose VACUUM the horizon ignores.
// Backends of other databases do not hold this one's horizon, except
// walsenders (no database: a standby's hot_standby_feedback).
//
// Both readings select from it, so that they agree on who holds the
// horizon: the gauges with no more columns (every names fragment empty),
// the listing with the columns that name each holder, inserted after the
// holder's kind by sessionNames, preparedNames and slotNames (each ends
// with a comma; the three must add the same columns, in the same order).
func holding(sessionNames, preparedNames, slotNames string) string {
	return `
    SELECT CASE WHEN a.datid IS NULL OR a.backend_type = 'walsender' THEN 'replication' ELSE 'session' END AS holder,` + sessionNames + `
           extract(epoch FROM now() - a.xact_start)::float8 AS age_seconds,
           greatest(age(a.backend_xmin), age(a.backend_xid))::bigint AS age_xids
      FROM pg_catalog.pg_stat_activity AS a
     WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND (a.datid IS NULL OR a.datid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()))
       AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
     UNION ALL
    SELECT 'prepared',` + preparedNames + ` extract(epoch FROM now() - p.prepared)::float8, age(p.transaction)::bigint
      FROM pg_catalog.pg_prepared_xacts AS p
     WHERE p.database = current_database()
     UNION ALL
    SELECT 'replication',` + slotNames + ` NULL, age(s.xmin)::bigint
      FROM pg_catalog.pg_replication_slots AS s
     WHERE s.xmin IS NOT NULL`
}

// queryHorizonAge reads, for each holder of the database's xmin horizon
// (Holders: sessions, prepared transactions, replication), how old its
// oldest is: in transactions (the age of the oldest xmin or xid; 0 when
// none), and in seconds since the transaction of that oldest one started
// (of the oldest among those whose start PostgreSQL shows; 0 when none).
// A transaction's start bounds its snapshot's age from above: a READ
// COMMITTED transaction that writes nothing takes a new snapshot for each
// statement. Every row also says whether the reading role sees the start
// of every session (it has the privileges of pg_read_all_stats).
//
// Its text is the relay's gauge_horizon statement, byte for byte
// (TestGoldenSQL_IsTheRelays).
var queryHorizonAge = `
SELECT h.holder,
       coalesce((array_agg(x.age_seconds ORDER BY x.age_xids DESC, x.age_seconds DESC)
                   FILTER (WHERE x.age_seconds IS NOT NULL))[1], 0)::float8,
       coalesce(max(x.age_xids), 0)::bigint,
       pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')
  FROM (VALUES (1, 'session'), (2, 'prepared'), (3, 'replication')) AS h(n, holder)
  LEFT JOIN (` + holding("", "", "") + `
       ) AS x ON x.holder = h.holder
 GROUP BY h.n, h.holder
 ORDER BY h.n`

// queryHorizonHolders lists the @limit oldest holders of the database's
// xmin horizon, oldest xmin first (then the longest held): each with its
// kind (holder: session, prepared, replication), pid (a slot's active
// walsender's; NULL for a prepared transaction), name (a prepared
// transaction's gid, a slot's name), user, application, state (each empty
// where PostgreSQL does not say), age in seconds since its transaction
// started (since its PREPARE for a prepared one; NULL where PostgreSQL
// does not say: slots, walsenders, and other roles' sessions without
// pg_read_all_stats) and age in transactions.
var queryHorizonHolders = `
SELECT holder, pid, coalesce(name, '') AS name, coalesce(usename, '') AS usename,
       coalesce(application_name, '') AS application_name, coalesce(state, '') AS state,
       age_seconds, age_xids
  FROM (` + holding(`
           a.pid, NULL::text AS name, a.usename::text AS usename, a.application_name, a.state,`,
	` NULL, p.gid, p.owner::text, NULL, NULL,
          `,
	` s.active_pid, s.slot_name::text, NULL, NULL, NULL,`) + `) AS h
 ORDER BY age_xids DESC, age_seconds DESC NULLS LAST
 LIMIT @limit`

// OldestAgeXids is an SQL expression (a scalar subquery) whose value is
// the age in transaction ids of the oldest holder of the current
// database's xmin horizon, whoever holds it (0 when none): the holders the
// readings count (holding). The hot table's rotator compares it with its
// current generation's (relay/internal/rotation, Render).
var OldestAgeXids = `(SELECT coalesce(max(h.age_xids), 0) FROM (` + holding("", "", "") + `
       ) AS h)`

// queryReadAllStats reads whether the reader sees when every session's
// transaction started (it has the privileges of pg_read_all_stats).
const queryReadAllStats = `
SELECT pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE') AS sees_all_sessions`

// Statements returns the readings' statements by name, as they run: the
// names of their golden files under testdata/ (gauge_horizon is the
// relay's name for queryHorizonAge, whose golden file it keeps).
func Statements() map[string]string {
	return map[string]string{
		"gauge_horizon":   queryHorizonAge,
		"horizon_holders": queryHorizonHolders,
		"read_all_stats":  queryReadAllStats,
		"oldest_age_xids": OldestAgeXids,
	}
}
