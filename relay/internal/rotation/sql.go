package rotation

import "strings"

// The statements of the rotator. {schema} is the quoted schema, filled in
// once by Render; @name is an argument of each execution, passed as
// pgx.StrictNamedArgs. The final text, for the schema "outbox", is in
// testdata/*.sql (TestGoldenSQL).

// queryCarry moves up to @chunk waiting rows out of the oldest draining
// generation once it has drained for @settle_s seconds (messages_carry,
// migration 24), waiting at most
// @lock_wait_ms to put a spare that is to take them back into
// messages_all (a call of its own, which moves nothing). It returns how
// many moved, whether it put the spare back, and whether that lock was in
// the way.
const queryCarry = `
SELECT carried, attached, busy
  FROM {schema}.messages_carry(@chunk::integer, @lock_wait_ms::float8 * interval '1 millisecond',
                               @settle_s::float8 * interval '1 second')`

// queryEmpty truncates the oldest draining generation if it holds no row,
// waiting at most @lock_wait_ms for its lock (messages_empty). It returns
// the slot emptied (null: none) and whether the lock was in the way.
const queryEmpty = `
SELECT emptied, busy
  FROM {schema}.messages_empty(@lock_wait_ms::float8 * interval '1 millisecond')`

// queryRotate makes the spare the current generation if the current one
// is @every_s seconds old and had an insert (messages_rotate), waiting at
// most @lock_wait_ms for the locks. It returns the new generation (null:
// none) and whether the locks were in the way.
const queryRotate = `
SELECT generation, busy
  FROM {schema}.messages_rotate(@every_s::float8 * interval '1 second',
                                @lock_wait_ms::float8 * interval '1 millisecond')`

// queryAnalyze analyzes the current generation once per turn, when it
// has taken @min_rows row ids (messages_analyze). It returns whether it
// did.
const queryAnalyze = `
SELECT {schema}.messages_analyze(@min_rows::bigint)`

// queryGenerations reports every slot's generation, state, table, since
// when and how long ago (the database's clock), whether messages_all reads it, rows (live and dead, the statistics' estimates) and bytes.
const queryGenerations = `
SELECT slot, generation, state, table_name, since, extract(epoch FROM now() - since)::float8 AS age_seconds,
       attached, live_rows, dead_rows, total_bytes
  FROM {schema}.messages_generations()`

// queryPinned reads whether the oldest holder of the database's MVCC
// horizon is older than the current generation: {horizon_age} is an
// expression of the age in transaction ids of that holder (Render's
// horizonAge), compared with the age of the catalog row of the current
// generation's table, which the transaction that made it current wrote
// (the rename; ANALYZE and vacuum update it in place). While it holds,
// none of the dead versions the generation has gathered can be vacuumed.
const queryPinned = `
SELECT coalesce({horizon_age} > age(c.xmin), false) AS pinned
  FROM {schema}.message_generations AS m
  JOIN pg_catalog.pg_class AS c ON c.oid = m.relid
 WHERE m.state = 'current'`

// Statements are the rotator's statements, rendered for a schema.
type Statements struct {
	// Carry moves waiting rows out of the oldest draining generation.
	Carry string
	// Empty truncates the oldest draining generation once it is empty.
	Empty string
	// Rotate makes the spare the current generation.
	Rotate string
	// Analyze analyzes the current generation once per turn.
	Analyze string
	// Generations reports the generations.
	Generations string
	// Pinned reads whether the horizon is older than the current
	// generation; empty when Render had no horizonAge: never.
	Pinned string
}

// Render returns the statements for schema, quoted (pgx.Identifier's
// Sanitize). horizonAge is an SQL expression whose value is the age in
// transaction ids of the oldest holder of the database's MVCC horizon (0
// when none), as the relay's horizon readings count holders; empty: the
// rotator never reads the horizon and turns every Config.Every, pin or no
// pin.
func Render(schema, horizonAge string) Statements {
	r := strings.NewReplacer("{schema}", schema, "{horizon_age}", horizonAge)
	s := Statements{
		Carry:       r.Replace(queryCarry),
		Empty:       r.Replace(queryEmpty),
		Rotate:      r.Replace(queryRotate),
		Analyze:     r.Replace(queryAnalyze),
		Generations: r.Replace(queryGenerations),
	}
	if horizonAge != "" {
		s.Pinned = r.Replace(queryPinned)
	}
	return s
}
