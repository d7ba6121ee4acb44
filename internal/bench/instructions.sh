#!/usr/bin/env bash
# instructions.sh counts the instructions PostgreSQL executes for the
# relay's work, with valgrind's callgrind: a count, not a time, so it is
# the same from run to run whatever else the machine is doing, and two
# versions can be compared on a noisy machine.
#
# It builds a throwaway cluster (initdb into a temporary directory), applies
# the migrations with the relay binary, then runs each workload in a
# single-user backend under callgrind, counting the statements' parse,
# planning and execution.
#
# Inserts, per row, into the outbox table (the table contract: the insert
# guard, the headers check, the unique idempotency key, the indexes) and
# into refloop's bare table:
#
#   bulk    one INSERT … SELECT of 10,000 rows
#   copy    COPY of the same 10,000 rows from a file
#   single  2,000 one-row INSERT statements, each its own transaction
#
# Every row: topic, a 256-byte payload and one header, as the benchmarks
# write them.
#
# The unordered mode's claim and settle (relay/testdata/unordered), per
# execution, 200 of each in BEGIN … ROLLBACK, run alone with their
# arguments in the text (as planPerExecution runs a statement: parsed,
# analyzed and planned each time) and as the relay runs them (prepared
# once, after the plan settings of relay/testdata/shared/plan_claims.sql):
#
#   idle poll    a claim of an empty table
#   claim        a claim of 10 rows past 20 that another relay holds
#   settle       a settle that archives 10 rows
#
# And a key's oldest row from the id floor up, looked up through
# messages_all as the keyed modes' claims look up each key of a claim
# (relay/sql_buckets.go, ofKey), prepared with a generic plan: per lookup,
# 5,000 keys of a table of 20,000 rows, 4 a key, not vacuumed (as a hot
# table: each lookup visits the heap):
#
#   key lookup   one lookup
#
# Usage (as root or the postgres user; make bench-instructions):
#
#   internal/bench/instructions.sh bin/outbox-relay
set -euo pipefail

bin=$(realpath "${1:?usage: $0 path/to/outbox-relay}")
pgbin=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
port=${PORT:-54329}
command -v valgrind >/dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }

dir=$(mktemp -d /tmp/insert-instructions.XXXXXX)
runas=()
if [ "$(id -u)" = 0 ]; then
	chown postgres "$dir"
	runas=(su postgres -c)
else
	runas=(bash -c)
fi
cleanup() {
	"${runas[@]}" "$pgbin/pg_ctl -D $dir/data -m immediate stop" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT

"${runas[@]}" "$pgbin/initdb -D $dir/data -U postgres -A trust" >/dev/null
printf "port=%s\nlisten_addresses='127.0.0.1'\nunix_socket_directories='%s'\nautovacuum=off\n" "$port" "$dir" >>"$dir/data/postgresql.conf"
"${runas[@]}" "$pgbin/pg_ctl -D $dir/data -l $dir/log -w start" >/dev/null
url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
DATABASE_URL=$url "$bin" migrate --schema outbox >/dev/null
psql -q "$url" -c "CREATE TABLE refloop (id bigserial PRIMARY KEY, subject text NOT NULL, payload bytea NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now(), lease_owner text,
    lease_until timestamptz, attempts int NOT NULL DEFAULT 0);
  CREATE INDEX refloop_pending_idx ON refloop (created_at, id) WHERE lease_until IS NULL;"
"${runas[@]}" "$pgbin/pg_ctl -D $dir/data -w stop" >/dev/null

payload="\\x$(printf 'ab%.0s' $(seq 1 256))"
for i in $(seq 1 10000); do printf 'bench.events,%s,"{""a"": ""b""}"\n' "$payload"; done >"$dir/rows.csv"
# workload <table> <topic column> <kind>: the SQL of one workload.
workload() {
	local table=$1 topic=$2
	case $3 in
	bulk)
		echo "TRUNCATE $table;"
		echo "INSERT INTO $table ($topic, payload, headers) SELECT 'bench.events', decode(repeat('ab', 256), 'hex'), '{\"a\": \"b\"}' FROM generate_series(1, 10000);" ;;
	copy)
		echo "TRUNCATE $table;"
		echo "COPY $table ($topic, payload, headers) FROM '$dir/rows.csv' (FORMAT csv);" ;;
	single)
		echo "TRUNCATE $table;"
		for _ in $(seq 1 2000); do
			echo "INSERT INTO $table ($topic, payload, headers) VALUES ('bench.events', decode(repeat('ab', 256), 'hex'), '{\"a\": \"b\"}');"
		done ;;
	esac
}
# commands <sql file>: ends each line that ends a statement with an empty
# line, the end of a command in single-user mode with -j: each statement is
# its own command (and, outside BEGIN … ROLLBACK, its own transaction).
commands() {
	sed -i 's/;$/;\n/' "$1"
}
# count <sql file>: the instructions of its statements in a single-user backend.
count() {
	commands "$1"
	"${runas[@]}" "valgrind --tool=callgrind --callgrind-out-file=$dir/cg.out \
		--toggle-collect=PortalRun --toggle-collect=pg_plan_queries --toggle-collect=pg_parse_query \
		--toggle-collect=pg_analyze_and_rewrite_fixedparams \
		$pgbin/postgres --single -D $dir/data -j postgres <$1 >$dir/single.log 2>&1"
	if grep -q ERROR "$dir/single.log"; then
		grep ERROR "$dir/single.log" >&2
		exit 1
	fi
	awk '/^summary:/ {print $2}' "$dir/cg.out"
}

printf '%-8s %14s %14s %7s\n' insert "outbox/row" "refloop/row" ratio
for kind in bulk copy single; do
	rows=10000
	[ $kind = single ] && rows=2000
	workload outbox.messages topic $kind >"$dir/ours.sql"
	workload refloop subject $kind >"$dir/ref.sql"
	chmod a+r "$dir"/*.sql
	ours=$(count "$dir/ours.sql")
	ref=$(count "$dir/ref.sql")
	awk -v k=$kind -v o="$ours" -v r="$ref" -v n=$rows 'BEGIN { printf "%-8s %14.0f %14.0f %6.2f×\n", k, o/n, r/n, o/r }'
done

# The relay's statements, from its golden files.
testdata=$(dirname "$0")/../../relay/testdata
flat() { tr '\n' ' ' <"$1"; }
claim_alone=$(flat "$testdata/unordered/claim.sql" | sed -e "s/@floor::timestamptz/'-infinity'::timestamptz/;
	s/@default_sink/'nats'/; s/@closed_sinks::text\[\]/'{}'::text[]/; s/@limit/10/; s/@byte_budget::bigint/100000000::bigint/;
	s/@oversized::bool/true/; s/@relay_id/'r1'/; s/@lease::interval/'30s'::interval/; s/@payload_max::bigint/1048576::bigint/g")
claim_prepared=$(flat "$testdata/unordered/claim.sql" | sed -e 's/@floor/$1/; s/@default_sink/$2/; s/@closed_sinks/$3/;
	s/@limit/$4/; s/@byte_budget/$5/; s/@oversized/$6/; s/@relay_id/$7/; s/@lease/$8/; s/@payload_max/$9/g')
claim_args="'-infinity', 'nats', '{}', 10, 100000000, true, 'r1', '30s', 1048576"
plan=$(flat "$testdata/shared/plan_claims.sql")
settle_prepared=$(flat "$testdata/unordered/archive_only.sql" | sed -e 's/@archive_ids/$1/g; s/@archive_seqs/$2/; s/@archive_duplicate/$3/')
custom="SELECT set_config('plan_cache_mode', 'force_custom_plan', true), set_config('jit', 'off', true)"

# setup <sql>: runs it in a single-user backend, not counted.
setup() {
	echo "$1" >"$dir/setup.sql"
	commands "$dir/setup.sql"
	chmod a+r "$dir/setup.sql"
	"${runas[@]}" "$pgbin/postgres --single -D $dir/data -j postgres <$dir/setup.sql >$dir/setup.log 2>&1"
	if grep -q ERROR "$dir/setup.log"; then
		grep ERROR "$dir/setup.log" >&2
		exit 1
	fi
}
# both <name> <alone sql> <prepare sql> <execute sql> <plan statement>:
# counts 200 executions run alone and prepared, and prints them.
both() {
	{
		for _ in $(seq 1 200); do
			echo "BEGIN;"
			echo "$2;"
			echo "ROLLBACK;"
		done
	} >"$dir/alone.sql"
	{
		echo "$3;"
		echo "PREPARE plan AS $5;"
		for _ in $(seq 1 200); do
			echo "BEGIN ISOLATION LEVEL READ COMMITTED;"
			echo "EXECUTE plan;"
			echo "$4;"
			echo "ROLLBACK;"
		done
	} >"$dir/prepared.sql"
	chmod a+r "$dir"/*.sql
	alone=$(count "$dir/alone.sql")
	prepared=$(count "$dir/prepared.sql")
	awk -v k="$1" -v a="$alone" -v p="$prepared" 'BEGIN { printf "%-12s %12.0f %12.0f %+6.0f%%\n", k, a/200, p/200, 100*(p-a)/a }'
}

insert="INSERT INTO outbox.messages (topic, payload, headers) SELECT 'bench.events', decode(repeat('ab', 256), 'hex'), '{\"a\": \"b\"}' FROM generate_series(1"
echo
printf '%-12s %12s %12s %7s\n' statement alone prepared change
setup "TRUNCATE outbox.messages;
VACUUM ANALYZE outbox.messages;"
both "idle poll" "$claim_alone" "PREPARE claim(timestamptz, text, text[], int, bigint, bool, text, interval, bigint) AS $claim_prepared" \
	"EXECUTE claim($claim_args)" "$plan"
setup "TRUNCATE outbox.messages;
$insert, 30);
UPDATE outbox.messages SET leased_by = 'other', leased_until = now() + interval '1 hour' WHERE id IN (SELECT id FROM outbox.messages ORDER BY id LIMIT 20);
VACUUM ANALYZE outbox.messages;"
both "claim" "$claim_alone" "PREPARE claim(timestamptz, text, text[], int, bigint, bool, text, interval, bigint) AS $claim_prepared" \
	"EXECUTE claim($claim_args)" "$plan"
# The settled rows get ids 1 to 10.
setup "TRUNCATE outbox.messages;
SELECT setval('outbox.messages_id_seq', 1, false);
$insert, 10);
UPDATE outbox.messages SET claim_seq = 1, leased_by = 'r1', leased_until = now() + interval '1 hour';
VACUUM ANALYZE outbox.messages;"
settle_args="'{1,2,3,4,5,6,7,8,9,10}', '{1,1,1,1,1,1,1,1,1,1}', '{f,f,f,f,f,f,f,f,f,f}'"
settle_alone=$(flat "$testdata/unordered/archive_only.sql" | sed -e "s/@archive_ids::bigint\[\]/'{1,2,3,4,5,6,7,8,9,10}'::bigint[]/g;
	s/@archive_seqs::int\[\]/'{1,1,1,1,1,1,1,1,1,1}'::int[]/; s/@archive_duplicate::bool\[\]/'{f,f,f,f,f,f,f,f,f,f}'::bool[]/")
both "settle" "$settle_alone" "PREPARE settle(bigint[], int[], bool[]) AS $settle_prepared" "EXECUTE settle($settle_args)" "$custom"

# The key lookups: one statement, 5,000 lookups, run 10 times.
setup "TRUNCATE outbox.messages;
INSERT INTO outbox.messages (topic, payload, key) SELECT 'bench.events', decode(repeat('ab', 256), 'hex'), 'key-' || (i % 5000) FROM generate_series(1, 20000) AS i;
ANALYZE outbox.messages;"
{
	echo "SET plan_cache_mode = force_generic_plan;"
	echo "PREPARE lookups(int) AS SELECT count(*) FROM generate_series(0, \$1 - 1) AS k, LATERAL (SELECT o.id FROM outbox.messages_all AS o WHERE o.key IS NOT NULL AND (o.key, o.id) >= ('key-' || k, 0) AND (o.key, o.id) <= ('key-' || k, 9223372036854775807) ORDER BY o.key, o.id LIMIT 1) AS l;"
	for _ in $(seq 1 10); do echo "EXECUTE lookups(5000);"; done
} >"$dir/lookups.sql"
{
	echo "SET plan_cache_mode = force_generic_plan;"
	echo "PREPARE lookups(int) AS SELECT count(*) FROM generate_series(0, \$1 - 1) AS k;"
	for _ in $(seq 1 10); do echo "EXECUTE lookups(5000);"; done
} >"$dir/keys.sql"
chmod a+r "$dir"/*.sql
lookups=$(count "$dir/lookups.sql")
keys=$(count "$dir/keys.sql")
echo
awk -v l="$lookups" -v k="$keys" 'BEGIN { printf "%-12s %12.0f\n", "key lookup", (l-k)/50000 }'
