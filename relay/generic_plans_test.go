package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestGenericPlans_StayIndexWalksAsTheTablesGrow: every mode's claim and
// settle run generic plans, made once per connection (queryClaimPlan,
// querySettlePlan). Plans made while the hot
// table and delivered_keys were empty, as a relay's first claims make
// them, still walk indexes once the tables hold 20,000 rows and 20,000
// delivered keys, their statistics unchanged: a generic claim once looked
// each claimed row's key up with a sequential scan of delivered_keys, and
// took up to 2.7 s. Nor does a settle join its rows with its arrays in a
// nested loop: a generic plan expecting one row once matched 936 rows that
// way, 875,160 comparisons.
func TestGenericPlans_StayIndexWalksAsTheTablesGrow(t *testing.T) {
	for _, mode := range outbox.Modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			db.SetMode(t, mode)
			r, err := New(db.Pool, Config{Schema: db.Name, Mode: mode, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
			if err != nil {
				t.Fatal(err)
			}
			req := claimRequest{limit: 16, bytes: 1 << 30, closed: []string{}}
			var claim string
			var args pgx.StrictNamedArgs
			var settle settleStatements
			var fence pgx.StrictNamedArgs
			switch m := r.mode.(type) {
			case *unordered:
				claim, args, settle = m.claim, r.engine.claims.messagesClaimArgs(req, nil), m.settle
			case *ordered:
				claim, args, settle = m.claimHeads, m.headsClaimArgs(req), m.settle
			case *partitioned:
				args, fence = ownEveryBucket(t, db.Pool, db, r, m, req)
				claim, settle = m.claims[0], m.settle
			}
			// Prepared statements belong to the session: both are prepared,
			// and their generic plans made, on empty tables in a first
			// transaction, and explained in a second one after the load.
			conn := db.Conn(t)
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, r.engine.claims.plan); err != nil {
				t.Fatal(err)
			}
			claimArgs := prepareAs(t, tx, "claim", claim, args)
			if n := len(executePrepared(t, tx, "claim", claimArgs)); n != 0 {
				t.Fatalf("the claim of an empty table leased %d rows", n)
			}
			if _, err := tx.Exec(ctx, querySettlePlan); err != nil {
				t.Fatal(err)
			}
			none := pgx.StrictNamedArgs{"archive_ids": []int64{}, "archive_seqs": []int32{}, "archive_duplicate": []bool{}}
			maps.Copy(none, fence)
			executePrepared(t, tx, "settle", prepareAs(t, tx, "settle", settle.archiveOnly, none))
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}

			db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key)
			            SELECT 'events.a', 'x', 'k' || (i % 16), 'key-' || i FROM generate_series(1, 20000) AS i`)
			db.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key, delivered_at)
			            SELECT 'delivered-' || i, now() FROM generate_series(1, 20000) AS i`)

			tx, err = conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, r.engine.claims.plan); err != nil {
				t.Fatal(err)
			}
			plan := explainPrepared(t, tx, "claim", claimArgs)
			if scans := growingSeqScans(plan); len(scans) > 0 {
				t.Errorf("the claim's generic plan, made on empty tables, reads %s", scans)
			}
			if scans := parentScans(plan); len(scans) > 0 {
				t.Errorf("the claim's plan scans messages_all itself, which holds no row: %s", scans)
			}
			ids, seqs := leasedRows(t, tx, db)
			if len(ids) == 0 {
				t.Fatal("the claim leased no row")
			}
			if _, err := tx.Exec(ctx, querySettlePlan); err != nil {
				t.Fatal(err)
			}
			dup := make([]bool, len(ids))
			archive := pgx.StrictNamedArgs{"archive_ids": ids, "archive_seqs": seqs, "archive_duplicate": dup}
			maps.Copy(archive, fence)
			settleArgs := positional(t, tx, "settle", archive, settle.archiveOnly)
			plan = explainPrepared(t, tx, "settle", settleArgs)
			if scans := growingSeqScans(plan); len(scans) > 0 {
				t.Errorf("the settle's generic plan, made on empty tables, reads %s", scans)
			}
			if scans := parentScans(plan); len(scans) > 0 {
				t.Errorf("the settle's plan scans messages_all itself, which holds no row: %s", scans)
			}
			eachPlanNode(plan, func(n map[string]any) {
				if n["Node Type"] == "Nested Loop" {
					t.Errorf("the settle's generic plan joins in a nested loop, once per row (%v rows, %v removed by the join filter)",
						n["Actual Rows"], n["Rows Removed by Join Filter"])
				}
			})
			if n := db.Count(t, "messages_all"); n != 20000 {
				t.Errorf("%d rows; want the 20,000 inserted (the explained settle is rolled back)", n)
			}
		})
	}
}

// growingSeqScans returns plan's sequential scans (seqScans) of tables
// that grow: all but buckets, which holds one row per bucket whatever
// the load.
func growingSeqScans(plan map[string]any) []string {
	var growing []string
	for _, scan := range seqScans(plan, "") {
		if !strings.HasPrefix(scan, "Seq Scan on buckets ") {
			growing = append(growing, scan)
		}
	}
	return growing
}

// parentScans returns plan's scans of messages_all itself, the parent of
// the hot table's generations, which holds no row: migration 26 lets the
// planner leave it out of every statement that selects rows by a column.
func parentScans(plan map[string]any) []string {
	var found []string
	eachPlanNode(plan, func(n map[string]any) {
		if typ, _ := n["Node Type"].(string); strings.HasSuffix(typ, "Scan") && n["Relation Name"] == "messages_all" {
			found = append(found, fmt.Sprintf("%s on messages_all (%v loops)", typ, n["Actual Loops"]))
		}
	})
	return found
}

// preparedArgs are the arguments of a statement prepared with PREPARE, as
// SQL literals cast to its parameters' types.
type preparedArgs []string

// prepareAs prepares sql (with @name arguments) in tx as the prepared
// statement name, and returns args as its arguments.
func prepareAs(t *testing.T, tx pgx.Tx, name, sql string, args pgx.StrictNamedArgs) preparedArgs {
	t.Helper()
	text, _, err := args.RewriteQuery(context.Background(), tx.Conn(), sql, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), "PREPARE "+name+" AS "+text); err != nil {
		t.Fatalf("prepare %s: %v", name, err)
	}
	return positional(t, tx, name, args, sql)
}

// positional returns args of the statement sql, prepared as name, as SQL
// literals in the order of its parameters.
func positional(t *testing.T, tx pgx.Tx, name string, args pgx.StrictNamedArgs, sql string) preparedArgs {
	t.Helper()
	ctx := context.Background()
	_, values, err := args.RewriteQuery(ctx, tx.Conn(), sql, nil)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	if err := tx.QueryRow(ctx, "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1", name).Scan(&types); err != nil {
		t.Fatal(err)
	}
	if len(types) != len(values) {
		t.Fatalf("%s takes %d parameters; %d given", name, len(types), len(values))
	}
	literals := make(preparedArgs, len(values))
	for i, v := range values {
		var lit string
		if err := tx.QueryRow(ctx, "SELECT quote_nullable($1::"+types[i]+")", v).Scan(&lit); err != nil {
			t.Fatalf("parameter %d of %s (%s): %v", i+1, name, types[i], err)
		}
		literals[i] = lit + "::" + types[i]
	}
	return literals
}

// executePrepared runs the prepared statement name with args in tx and
// returns the first column of its rows.
func executePrepared(t *testing.T, tx pgx.Tx, name string, args preparedArgs) []any {
	t.Helper()
	rows, err := tx.Query(context.Background(), "EXECUTE "+name+"("+strings.Join(args, ", ")+")", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	var first []any
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if len(v) > 0 && v[0] != nil {
			first = append(first, v[0])
		}
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return first
}

// explainPrepared runs EXPLAIN (ANALYZE, FORMAT JSON) of the prepared
// statement name with args in tx: the plan its executions use (with
// plan_cache_mode = force_generic_plan, the generic plan cached at its
// first execution).
func explainPrepared(t *testing.T, tx pgx.Tx, name string, args preparedArgs) map[string]any {
	t.Helper()
	var text string
	if err := tx.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "+name+"("+strings.Join(args, ", ")+")",
		pgx.QueryExecModeSimpleProtocol).Scan(&text); err != nil {
		t.Fatalf("explain %s: %v", name, err)
	}
	var out []map[string]any
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatal(err)
	}
	return out[0]["Plan"].(map[string]any)
}

// leasedRows returns the ids and claim_seq of db's leased rows, in tx.
func leasedRows(t *testing.T, tx pgx.Tx, db *dbtest.Schema) (ids []int64, seqs []int32) {
	t.Helper()
	rows, err := tx.Query(context.Background(), "SELECT id, claim_seq FROM "+db.Table("messages")+" WHERE leased_by IS NOT NULL ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var seq int32
		if err := rows.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		ids, seqs = append(ids, id), append(seqs, seq)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return ids, seqs
}

// TestPlans_LeaveOutTheEmptyParent: every claim and settle statement of
// every mode selects its rows by a column with a strict condition, so
// that the planner leaves messages_all itself, which holds no row, out of
// its plan (migration 26): the claims with and without held keys, ordered
// mode's claims of heads and of rows without a key, the settles whole and
// archiving only, and ordered mode's promotion after a settle.
func TestPlans_LeaveOutTheEmptyParent(t *testing.T) {
	for _, mode := range outbox.Modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			db.SetMode(t, mode)
			db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'events.a', 'x', CASE WHEN i % 3 > 0 THEN 'k' || (i % 7) END FROM generate_series(1, 300) AS i`)
			r, err := New(db.Pool, Config{Schema: db.Name, Mode: mode, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
			if err != nil {
				t.Fatal(err)
			}
			tx := planTx(t, db)
			req := claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}}
			var claimArgs, fence pgx.StrictNamedArgs
			if mode != outbox.ModeOrdered {
				_, _, claimArgs, fence = lookupStatements(t, tx, db, r)
			}
			settleArgs := pgx.StrictNamedArgs{
				"archive_ids": []int64{}, "archive_seqs": []int32{}, "archive_duplicate": []bool{},
				"requeue_ids": []int64{}, "requeue_seqs": []int32{}, "requeue_delay_us": []int64{}, "requeue_errors": []string{}, "requeue_release": []bool{},
				"dead_ids": []int64{}, "dead_seqs": []int32{}, "dead_reasons": []string{}, "dead_errors": []string{},
			}
			maps.Copy(settleArgs, fence)
			archiveArgs := pgx.StrictNamedArgs{"archive_ids": []int64{}, "archive_seqs": []int32{}, "archive_duplicate": []bool{}}
			maps.Copy(archiveArgs, fence)
			type statement struct {
				name string
				sql  string
				args pgx.StrictNamedArgs
			}
			var statements []statement
			var settle settleStatements
			switch m := r.mode.(type) {
			case *unordered:
				settle = m.settle
				statements = append(statements, statement{"claim", m.claim, claimArgs})
			case *ordered:
				settle = m.settle
				statements = append(statements,
					statement{"claim of heads", m.claimHeads, m.headsClaimArgs(req)},
					statement{"claim of rows without a key", m.claimUnkeyed, r.engine.claims.messagesClaimArgs(req, nil)},
					statement{"promotion", settle.then, pgx.StrictNamedArgs{"keys": []string{"k1", "k2"}, "after": []int64{1, 2}}})
			case *partitioned:
				settle = m.settle
				held := maps.Clone(claimArgs)
				held["held_keys"] = []string{"k1", "k2"}
				statements = append(statements,
					statement{"claim", m.claims[0], claimArgs},
					statement{"claim with held keys", m.claims[1], held})
			}
			statements = append(statements, statement{"settle", settle.settle, settleArgs})
			if settle.archiveOnly != "" {
				statements = append(statements, statement{"archiving settle", settle.archiveOnly, archiveArgs})
			}
			for _, s := range statements {
				if scans := parentScans(explain(t, tx, s.sql, s.args)); len(scans) > 0 {
					t.Errorf("the %s scans messages_all itself, which holds no row: %s", s.name, scans)
				}
			}
		})
	}
}
