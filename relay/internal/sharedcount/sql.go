package sharedcount

// The statements of the protocol. {table} is the readings' table, quoted
// (Config.Table), filled in once; the other names are arguments of each
// execution (pgx.StrictNamedArgs): @relay (text: this relay's id), @fresh
// (interval: readings younger than this are used, not counted again), @hold
// (interval: how long a turn lasts), @began (timestamptz: when the round
// that counted began) and @readings (jsonb). Their final text is in
// testdata/<name>.sql (TestGoldenSQL, Statements).

// queryRound takes the turn to count when the readings are stale and nobody
// holds it, and returns when the turn began (NULL: not taken), the readings
// stored and their age in seconds (0 before the first count). Its select
// reads the row as the statement's snapshot saw it, before the update and
// before another relay's update that the update waited for: when the turn is
// taken the readings returned are the last count's, and a relay that finds
// neither the turn nor readings may have lost the turn to one that counts
// the first (Round tries again).
const queryRound = `
WITH turn AS (
    UPDATE {table}
       SET counting_until = now() + @hold::interval, counted_by = @relay
     WHERE counted_at <= now() - @fresh::interval AND counting_until <= now()
 RETURNING now() AS began
)
SELECT (SELECT began FROM turn), g.readings,
       CASE WHEN isfinite(g.counted_at) THEN greatest(extract(epoch FROM now() - g.counted_at)::float8, 0) ELSE 0 END
  FROM {table} AS g`

// queryStore stores the readings of the count that began at @began and
// ends the turn, if it is still this relay's (one that outlasted its turn
// leaves the next holder's alone). A later count stored first (another
// relay's that began after this one) is kept.
const queryStore = `
UPDATE {table}
   SET counted_at = @began::timestamptz, readings = @readings::jsonb,
       counting_until = CASE WHEN counted_by = @relay THEN '-infinity'::timestamptz ELSE counting_until END
 WHERE counted_at <= @began::timestamptz`

// queryRelease gives back the turn of a count that failed, so that the next
// round of any relay may count.
const queryRelease = `
UPDATE {table}
   SET counting_until = '-infinity'
 WHERE counted_by = @relay AND counting_until > now()`

// Statements returns every statement with {table} filled in with a sample
// name, by name, for golden files.
func Statements() map[string]string {
	c := Config{Table: `"outbox".gauge_readings`}
	return map[string]string{
		"round":   c.render(queryRound),
		"store":   c.render(queryStore),
		"release": c.render(queryRelease),
	}
}
