package relay

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// The statements of the relay, as named constants, one file per concern:
// the dialect and the plan settings every claim and settle runs under
// (this one), the claims (sql_claim.go), ordered mode's heads
// (sql_heads.go), the buckets (sql_buckets.go), the settles
// (sql_settle.go) and the housekeeping (sql_housekeeping.go). Two kinds of
// names mark what a statement is given:
//
//   - {slot}: text filled in once, when a Relay renders its statements:
//     {schema} is the quoted schema, and a mode fills the slots of the
//     claim and the settle it runs (an empty slot leaves the part out);
//   - @name: an argument of each execution, passed as pgx.StrictNamedArgs,
//     so that a statement fails rather than run with one missing.
//
// The final text of every statement of every mode is in
// testdata/<mode>/<statement>.sql (TestGoldenSQL).
//
// The hot table rotates (migration 24, relay/internal/rotation): producers
// insert into messages, the current generation, and the former ones,
// renamed messages_g<slot>, keep their rows until they are delivered. So
// every statement that reads, claims, settles or locks rows names
// messages_all, the table every generation's table inherits from (it holds
// no row of its own): through it a statement sees every generation, each
// scanned through its own indexes (a plan appends them, with a trivial
// scan of the empty parent). The indexes named below (messages_due_idx,
// messages_key_idx, …) are slot 1's names; each generation's table has
// its own copy (messages_g<slot>_due_idx, …). The statistics of the hot
// table (its dead tuples, the lock requests on it, its autovacuum
// setting) are those of every table in message_generations.
//
// Three habits keep the plans from walking an index that does not bound
// them, which costs every dead entry a pinned horizon keeps and which the
// planner chooses when ANALYZE last saw a nearly empty table
// (lookup_by_id_test.go):
//
//   - lookups by id leave the due indexes to the statements that bound
//     available_at (they are partial, migration 10); one that also asks
//     whether a row is due asks it inside a row comparison, which does not
//     imply their predicate;
//   - lookups of a key's rows name the order of messages_key_idx (ORDER BY
//     key, id; (key, id) < (…) for older rows), which the primary key
//     cannot give, and bound the key in row comparisons (ofKey) rather than
//     as key = …, which would drop it from the order and let the primary
//     key give id order;
//   - in partitioned mode, the bucket walk bounds available_at inside row
//     comparisons led by the bucket, which messages_due_idx cannot serve,
//     and states the bucket index's predicate, which no other statement
//     does (migration 11).

// planPerExecution runs a statement as PostgreSQL's unnamed prepared
// statement, which is parsed and planned for the arguments of each
// execution (with the description cached by pgx, still one round trip): a
// cached generic plan does not know the arguments, nor how much the tables
// grew since it was made, and can be badly wrong. The gauges, the repairs
// and the sampled claim run so, seldom. Claims and settles, which run all
// the time, are prepared statements in pipelines of their own instead
// (claimRunner.inIndexOrder, settler.inPipeline), parsed once per
// connection and planned as a setting of their transaction says
// (queryClaimPlan, querySettlePlan).
const planPerExecution = pgx.QueryExecModeCacheDescribe

// slotPattern matches a slot.
var slotPattern = regexp.MustCompile(`\{[a-z_]+\}`)

// render fills the slots of q: {schema} with the quoted schema, the others
// from slots (fragments may hold slots themselves). A slot left unfilled is
// a bug in the relay: it panics.
func render(q, schema string, slots map[string]string) string {
	pairs := []string{"{schema}", outbox.QuoteSchema(schema)}
	for name, text := range slots {
		pairs = append(pairs, "{"+name+"}", text)
	}
	fill := strings.NewReplacer(pairs...)
	for range 3 {
		q = fill.Replace(q)
	}
	if left := slotPattern.FindString(q); left != "" {
		panic(fmt.Sprintf("relay: statement rendered with its slot %s unfilled:\n%s", left, q))
	}
	return q
}

// queryClaimPlan sets, for the rest of a claim's transaction, the planner
// settings that make a claim walk its index in order and stop at its
// limit. A bitmap scan or a sequential scan reads every due row, then
// sorts them, before it returns the first: the unordered claim of 1,000
// rows under a backlog of 100,000 took 82.7 ms that way and 5.4 ms with
// both off (EXPLAIN ANALYZE, PostgreSQL 15). The planner picks them when
// the table's statistics are older than the backlog (a hot table is
// analyzed nearly empty), which is most of the time. Off is a penalty, not
// a ban: a plan with no other way still runs. Sorts stay on: with them off
// the same claim's update took 338 ms. JIT is off (jitOff).
//
// With both off, every path of every mode's claim is an index walk
// whatever the arguments and the tables' sizes, so the claim,
// a prepared statement of the connection (inPipeline), runs a generic
// plan, made once per connection and again whenever a table it reads
// changes (a rotation of the hot table, an ANALYZE): planning a custom
// plan took twice as long as running a claim of 10 rows (0.31-0.45 ms
// against 0.16 ms, EXPLAIN ANALYZE, PostgreSQL 15), and over a steady
// 10k rows/s it was half of the claims' time in pg_stat_statements. The
// generic plan that once went wrong (a sequential scan of delivered_keys
// while it was nearly empty, docs/benchmarks.md) is one these settings
// rule out.
const queryClaimPlan = `
SELECT set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true),
       ` + jitOff

// queryClaimPlanPerExecution is queryClaimPlan with a plan made for each
// execution's arguments: the claim floor's refreshes (relay/internal/floor),
// seldom, whose statements differ by mode and were never measured with a
// generic plan.
const queryClaimPlanPerExecution = `
SELECT set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('plan_cache_mode', 'force_custom_plan', true),
       ` + jitOff

// jitOff turns PostgreSQL's JIT compilation off for the rest of the
// transaction. The planner compiles a statement whose estimated cost
// passes jit_above_cost (100,000 by default), at every execution: on a
// hot table whose statistics are older than its size, the estimates of
// statements that read a few hundred rows grow with the table, and under
// a pinned horizon the table only grows. Ten minutes into a pinned run an
// ordered claim was estimated at 366k to 501k, and each spent 0.4 to 6 s
// compiling for 7k buffers of work: the claims fell from 12k to 5.6k a
// minute, and commit → receipt p99 from 32 ms to 5.8 s. The binary's
// connections start with it off as well (internal/cli: openPool).
const jitOff = `set_config('jit', 'off', true)`

// querySettlePlan plans the statements of the rest of a settle's
// transaction (settler.inPipeline), which pgx runs as prepared statements,
// once per connection: each finds its rows by id, and with sequential and
// bitmap scans off (as queryClaimPlan) every path is an index lookup
// whatever the length of its arrays, so a generic plan is the plan each
// execution would make. Planned for each execution, a settle at a steady
// 10k rows/s spent a third of its time planning. Nested loops are off as
// well: a generic plan does not know how many ids a settle's arrays hold,
// and one that expected a single row matched 936 settled rows with their
// array in a nested loop, once per row (a partitioned settle of 1,000
// rows took 550-770 ms instead of 27-37 ms); the settle's joins are
// between its rows and its arrays, which a hash or merge join does in one
// pass (queryMessagesSettle). JIT is off (jitOff).
const querySettlePlan = `
SELECT set_config('enable_bitmapscan', 'off', true),
       set_config('enable_nestloop', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true),
       ` + jitOff
