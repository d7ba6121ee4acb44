package floor

import "strings"

// The statements of the floor. Two kinds of names mark what a statement is
// given, as in the relay's statements:
//
//   - {slot}: text filled in once, by Render: {schema} is the quoted
//     schema, and {oldest} the claim strategy's oldest-claimable fragment
//     (doc.go);
//   - @name: an argument of each execution, passed as pgx.StrictNamedArgs:
//     @start (timestamptz: the floor a refresh starts from, -infinity for
//     the oldest row) and @start_id (bigint: the id floor it starts from,
//     the smallest bigint for the oldest row).
//
// The final text, for a sample fragment, is in testdata/*.sql
// (TestGoldenSQL).

// queryFloor reads what a refresh of the claim floor needs, in one
// statement and so one snapshot: the transaction's start time, the
// snapshot, the id sequence's last value, a transaction id taken after both
// (the refresh's mark: the expressions are evaluated in order), whether
// the sequence hands out its values one after the other (no cache, no
// cycle), the oldest available_at at or above @start (-infinity: the
// oldest) of a row the mode's claims may take ({oldest}: the claim
// strategy's fragment), and the oldest row at or above @start_id, through
// the primary key (oldestID).
const queryFloor = `
SELECT now(), pg_current_snapshot()::text,
       pg_sequence_last_value('{schema}.messages_id_seq'::regclass),
       pg_current_xact_id()::text,
       (SELECT s.seqcache = 1 AND NOT s.seqcycle AND s.seqincrement > 0
          FROM pg_sequence AS s
         WHERE s.seqrelid = '{schema}.messages_id_seq'::regclass),
       {oldest},
       ` + oldestID

// oldestID is the oldest row at or above @start_id, in every generation of
// the hot table (messages_all, migration 24), through each one's primary
// key: queryFloor's and queryFloorRescan's last column.
const oldestID = `(SELECT id FROM {schema}.messages_all
         WHERE id >= @start_id::bigint
         ORDER BY id
         LIMIT 1)`

// queryFloorRescan reads the oldest row a claim may take ({oldest}, from
// @start: -infinity) and the oldest row by id (from @start_id: the
// smallest bigint), for the floor's rescan. It takes no transaction id: it
// is no writer other relays' floors wait for.
const queryFloorRescan = `
SELECT {oldest},
       ` + oldestID

// IDFloor is the id a claim strategy's lookups of a key's oldest rows start
// from (doc.go): the id floor (@id_floor), or, when one of the transactions
// the floor passed while they were in progress (@passed_writers) has ended
// as this statement's snapshot sees it, the smallest row id that one may
// hold (@passed_ids), where the next refresh sends the floor back. Until
// then the rows it committed may lie below the floor, and a later row of
// their key, written after that commit, must not go first. (From the
// smallest bigint, as it was, each lookup under a pinned horizon walked its
// key's whole history: a claim slower than the floor's patience was itself
// passed, and made the claims after it as slow, a stall.) Computed once per
// statement. State.IDs returns its three arguments.
const IDFloor = `(SELECT least(min(w.id), @id_floor::bigint)
                    FROM unnest(@passed_writers::text[]::xid8[], @passed_ids::bigint[]) AS w(x, id)
                   WHERE pg_visible_in_snapshot(w.x, pg_current_snapshot()))`

// Statements are the floor's statements, rendered for one schema and one
// claim strategy (Render).
type Statements struct {
	// Refresh reads what a refresh needs (queryFloor); it takes a
	// transaction id.
	Refresh string
	// Rescan reads the oldest rows (queryFloorRescan); it takes no
	// transaction id.
	Rescan string
}

// Render renders the floor's statements for the quoted schema with a claim
// strategy's oldest-claimable fragment (oldest, which may hold {schema}
// itself): {oldest} is filled first, then {schema}.
func Render(quotedSchema, oldest string) Statements {
	fill := func(q string) string {
		q = strings.ReplaceAll(q, "{oldest}", oldest)
		return strings.ReplaceAll(q, "{schema}", quotedSchema)
	}
	return Statements{Refresh: fill(queryFloor), Rescan: fill(queryFloorRescan)}
}
