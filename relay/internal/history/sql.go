package history

import "strings"

// The statements of the keeper. Two kinds of names mark what a statement
// is given, as in the relay's statements:
//
//   - {slot}: text filled in once, by Render: {schema} is the quoted
//     schema, {table} the history table (archive or delivered_keys);
//   - @name: an argument of each execution, passed as pgx.StrictNamedArgs.
//
// The final text, for the schema "outbox", is in testdata/*.sql
// (TestGoldenSQL).

// queryMaintain runs one round of the schema's history_maintain (migration
// 23) for @table at @at (null: the database's now(), which stamps
// delivered_at too): partitions added up to a width past it, those at
// least @keep_s seconds old dropped (@keep_s null: none), each lock waited
// for at most @lock_wait_ms. It returns the time of the round, the
// partitions added and dropped, the rows the dropped ones held, and
// whether a lock or another relay's round was in the way (busy).
const queryMaintain = `
SELECT r.at, m.created, m.dropped, m.dropped_rows, m.busy
  FROM (SELECT coalesce(@at::timestamptz, now()) AS at) AS r,
       {schema}.history_maintain(@table::text, r.at,
                                 @width_s::float8 * interval '1 second',
                                 @keep_s::float8 * interval '1 second',
                                 @lock_wait_ms::float8 * interval '1 millisecond') AS m`

// queryPartitions lists @table's partitions and their bounds, oldest
// first: -infinity as the lower bound of the first partition, which holds
// the rows archived before migration 23.
const queryPartitions = `
SELECT partition_name, lower_bound, upper_bound
  FROM {schema}.history_partitions(@table::text)
 ORDER BY upper_bound`

// queryDeleteExpiredFirst deletes up to @chunk rows of {table} delivered
// before @before, which is never later than the first partition's upper
// bound: every such row lies in the first partition, so ctids name rows
// of that partition alone. The keeper repeats it until fewer come back.
const queryDeleteExpiredFirst = `
DELETE FROM {schema}.{table}
 WHERE delivered_at < @before
   AND ctid = ANY (ARRAY(SELECT ctid FROM {schema}.{table} WHERE delivered_at < @before LIMIT @chunk))`

// Statements are the keeper's statements, rendered for a schema.
type Statements struct {
	// Maintain runs history_maintain for a table.
	Maintain string
	// Partitions lists a table's partitions.
	Partitions string
	// DeleteExpiredFirst deletes the first partition's expired rows, a
	// chunk at a time, by table.
	DeleteExpiredFirst map[string]string
}

// Tables are the history tables, by name.
var Tables = []string{"archive", "delivered_keys"}

// Render returns the statements for schema, quoted (pgx.Identifier's
// Sanitize).
func Render(schema string) Statements {
	s := Statements{
		Maintain:           strings.ReplaceAll(queryMaintain, "{schema}", schema),
		Partitions:         strings.ReplaceAll(queryPartitions, "{schema}", schema),
		DeleteExpiredFirst: map[string]string{},
	}
	for _, t := range Tables {
		s.DeleteExpiredFirst[t] = strings.NewReplacer("{schema}", schema, "{table}", t).Replace(queryDeleteExpiredFirst)
	}
	return s
}
