package relay

// The settle statements: what a settle writes down, in one statement per
// settle (settle.go).

// settleArchive moves the delivered rows and the rows skipped as
// duplicates (@archive_ids, @archive_seqs: their claim_seq,
// @archive_duplicate) to the archive and records the delivered keys that
// producers chose (dedup): the first parts of queryMessagesSettle, and the
// whole of queryMessagesArchive. {fence} is the mode's condition on every
// row a settle touches (empty: none).
const settleArchive = `archived AS (
    DELETE FROM {schema}.messages_all AS m
     USING unnest(@archive_ids::bigint[], @archive_seqs::int[], @archive_duplicate::bool[]) AS s(id, claim_seq, duplicate)
     WHERE m.id = ANY (@archive_ids::bigint[]) AND m.id = s.id AND m.claim_seq = s.claim_seq{fence}
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, s.duplicate, m.dedup
), archive_insert AS (
    INSERT INTO {schema}.archive (id, topic, payload, key, headers, idempotency_key, destination,
                               created_at, attempts, delivered_at, duplicate)
    SELECT id, topic, payload, key, headers, idempotency_key, destination,
           created_at, attempts, now(), duplicate
      FROM archived
), keys_insert AS (
    INSERT INTO {schema}.delivered_keys (idempotency_key, delivered_at)
    SELECT idempotency_key, now() FROM archived WHERE dedup AND NOT duplicate
)`

// queryMessagesArchive is settleArchive alone, for the settles that only
// archive (most of them): it skips the parts for requeued and dead rows,
// which every execution of the whole settle runs, empty or not (planned
// for each execution, it also planned in about a third of the time, 0.3
// ms against 0.8 ms). It returns the ids
// archived. {fence_cte} is the mode's CTE that {fence} reads (empty: none).
const queryMessagesArchive = `
WITH {fence_cte}` + settleArchive + `
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}')`

// queryMessagesSettle writes down the outcomes of deliveries in one
// statement (one round trip, one transaction):
//
//   - delivered rows, and rows skipped as duplicates, move to the archive,
//     and the keys of those delivered are recorded when the producer chose
//     them (settleArchive);
//   - rows to try again (@requeue_ids, @requeue_seqs) end their lease and
//     become due after @requeue_delay_us microseconds, with
//     @requeue_errors as the last error (NULL keeps the previous one);
//     @requeue_release gives the attempt back (released without a delivery
//     being tried to the end);
//   - failed rows (@dead_ids, @dead_seqs) move to the dead letters with
//     @dead_reasons and @dead_errors.
//
// It returns the ids each part touched, then the ids of dead rows whose id
// was a dead letter's already (a row inserted before ids were the
// database's alone, a sequence set back) and the ids they were
// dead-lettered under instead: such a row is dead-lettered with a new id
// from the rows' sequence, and its error says so, rather than failing the
// settle of its batch. A row is touched only while its
// claim_seq is still that of the claim that delivered it: every claim
// increments claim_seq and nothing decreases it, so a row another claim has
// taken over (after this one's lease expired) no longer matches and the late
// outcome is dropped, even when a settle is retried after a commit whose
// answer was lost. A mode adds its fence ({fence_cte}, {fence}) and what it
// moves with the rows ({after}: a CTE that reads archived, requeued and
// dead).
//
// Each part finds its rows through the primary key (id = ANY) and matches
// them with its arrays in a hash or merge join: the settle's plan settings
// (querySettlePlan) rule out sequential scans and nested loops, so that no
// plan, generic or not, scans the table, or an array, once per settled row
// (a filter on a column such as leased_by whose statistics were taken
// while no row was leased once made PostgreSQL scan the whole table once
// per settled row; a generic plan that expected one row joined 936 rows
// with their array in a nested loop, 875,160 comparisons). Whether a dead
// row's id is a dead letter's already is a lookup per row, not a join.
const queryMessagesSettle = `
WITH {fence_cte}` + settleArchive + `, requeued AS (
    UPDATE {schema}.messages_all AS m
       SET leased_by = NULL,
           leased_until = NULL,
           available_at = now() + r.delay_us * interval '1 microsecond',
           last_error = coalesce(r.error, m.last_error),
           first_error = coalesce(m.first_error, r.error),
           attempts = greatest(m.attempts - CASE WHEN r.release THEN 1 ELSE 0 END, 0)
      FROM unnest(@requeue_ids::bigint[], @requeue_seqs::int[], @requeue_delay_us::bigint[], @requeue_errors::text[], @requeue_release::bool[])
           AS r(id, claim_seq, delay_us, error, release)
     WHERE m.id = ANY (@requeue_ids::bigint[]) AND m.id = r.id AND m.claim_seq = r.claim_seq{fence}
 RETURNING m.id, m.key, m.available_at
), dead AS (
    DELETE FROM {schema}.messages_all AS m
     USING unnest(@dead_ids::bigint[], @dead_seqs::int[], @dead_reasons::text[], @dead_errors::text[]) AS d(id, claim_seq, reason, error)
     WHERE m.id = ANY (@dead_ids::bigint[]) AND m.id = d.id AND m.claim_seq = d.claim_seq{fence}
 RETURNING m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
           m.created_at, m.attempts, d.reason, d.error, m.first_error
){after}, dead_ids AS MATERIALIZED (
    SELECT d.*, CASE WHEN EXISTS (SELECT FROM {schema}.dead_letters AS t WHERE t.id = d.id)
                     THEN nextval('{schema}.messages_id_seq') ELSE d.id END AS dead_id
      FROM dead AS d
), dead_insert AS (
    INSERT INTO {schema}.dead_letters (id, topic, payload, key, headers, idempotency_key, destination,
                                    created_at, attempts, reason, error, first_error)
    SELECT dead_id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason,
           CASE WHEN dead_id = id THEN error
                ELSE error || ' [dead-lettered as ' || dead_id || ': id ' || id || ' was a dead letter''s already]' END,
           first_error
      FROM dead_ids
)
SELECT coalesce((SELECT array_agg(id) FROM archived), '{}'),
       coalesce((SELECT array_agg(id) FROM requeued), '{}'),
       coalesce((SELECT array_agg(id) FROM dead), '{}'),
       coalesce((SELECT array_agg(id ORDER BY id) FROM dead_ids WHERE dead_id <> id), '{}'),
       coalesce((SELECT array_agg(dead_id ORDER BY id) FROM dead_ids WHERE dead_id <> id), '{}')`

// settleStatements are the settle statements of a mode, rendered.
type settleStatements struct {
	// settle is queryMessagesSettle; archiveOnly is queryMessagesArchive,
	// or empty where every settle must run the whole statement.
	settle, archiveOnly string
	// then, when set, is a statement the settle runs after the settle
	// statement, in the same transaction, for the keys (@keys) of the rows
	// it deleted (ordered mode: queryHeadsPromote).
	then string
	// dropped is the warning logged when a settle finds rows no longer
	// under the claim that delivered them.
	dropped string
}

// droppedOutcomes is the usual settleStatements.dropped.
const droppedOutcomes = "rows were claimed again before this relay settled them (its lease had expired); their outcome here is dropped and they are delivered under the new claim"

// settleSlots are what a mode puts into the settle statements' slots.
type settleSlots struct {
	fenceCTE, fence, after string
}

// renderSettle renders the settle statements for schema with a mode's
// slots; withArchiveOnly keeps the shorter statement for settles that only
// archive.
func renderSettle(schema string, s settleSlots, withArchiveOnly bool) settleStatements {
	slots := map[string]string{"fence_cte": s.fenceCTE, "fence": s.fence, "after": s.after}
	st := settleStatements{settle: render(queryMessagesSettle, schema, slots), dropped: droppedOutcomes}
	if withArchiveOnly {
		st.archiveOnly = render(queryMessagesArchive, schema, slots)
	}
	return st
}
