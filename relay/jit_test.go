package relay

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestClaims_RunWithoutJIT: every mode's claim, run after the claim's plan
// settings (queryClaimPlan), and ordered mode's promotion, run after the
// settle's (querySettlePlan), are never compiled by PostgreSQL's JIT,
// however high their estimates: here jit_above_cost is 0, and the same
// claim without those settings is compiled. Ten minutes into a pinned run,
// an ordered claim spent 0.4 s and more compiling at each execution.
func TestClaims_RunWithoutJIT(t *testing.T) {
	t.Parallel()
	for _, mode := range outbox.Modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			db, r := staleStatistics(t, mode)
			tx := planTx(t, db)
			ctx := context.Background()
			var available bool
			if err := tx.QueryRow(ctx, "SELECT pg_jit_available()").Scan(&available); err != nil {
				t.Fatal(err)
			}
			if !available {
				t.Skip("this PostgreSQL server cannot JIT-compile (pg_jit_available() is false): nothing to turn off")
			}
			if _, err := tx.Exec(ctx, "SELECT set_config('jit', 'on', true), set_config('jit_above_cost', '0', true)"); err != nil {
				t.Fatal(err)
			}
			claim, args, then, thenArgs := jitStatements(t, tx, db, r)
			if !compiled(t, tx, claim, args) {
				t.Fatal("the claim is not compiled with jit_above_cost = 0 and no plan settings: the test proves nothing")
			}
			if _, err := tx.Exec(ctx, r.engine.claims.plan); err != nil {
				t.Fatal(err)
			}
			if compiled(t, tx, claim, args) {
				t.Errorf("the claim is compiled by JIT after the claim's plan settings")
			}
			if then == "" {
				return
			}
			if _, err := tx.Exec(ctx, "SELECT set_config('jit', 'on', true)"); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, querySettlePlan); err != nil {
				t.Fatal(err)
			}
			if compiled(t, tx, then, thenArgs) {
				t.Errorf("the settle's promotion is compiled by JIT after the settle's plan settings")
			}
		})
	}
}

// jitStatements returns r's claim with its arguments, and in ordered mode
// the statement its settles run after deleting (then), with arguments.
func jitStatements(t *testing.T, tx pgx.Tx, db *dbtest.Schema, r *Relay) (claim string, args pgx.StrictNamedArgs, then string, thenArgs pgx.StrictNamedArgs) {
	t.Helper()
	if m, ok := r.mode.(*ordered); ok {
		req := claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}}
		return m.claimHeads, m.headsClaimArgs(req), m.settle.then, pgx.StrictNamedArgs{"keys": []string{"k1"}, "after": []int64{0}}
	}
	claim, _, args, _ = lookupStatements(t, tx, db, r)
	return claim, args, "", nil
}

// compiled reports whether EXPLAIN ANALYZE of sql with args in tx says JIT
// compiled it; the statement's writes are rolled back.
func compiled(t *testing.T, tx pgx.Tx, sql string, args pgx.StrictNamedArgs) bool {
	t.Helper()
	ctx := context.Background()
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sp.Rollback(ctx) }()
	var out []map[string]any
	if err := sp.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args).Scan(&out); err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	_, jit := out[0]["JIT"]
	return jit
}
