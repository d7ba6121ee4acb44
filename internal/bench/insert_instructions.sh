#!/usr/bin/env bash
# insert_instructions.sh counts the instructions PostgreSQL executes to
# insert a row into the outbox table (the table contract: the insert guard,
# the headers check, the unique idempotency key, the indexes) and into
# refloop's bare table, with valgrind's callgrind: a count, not a time, so it
# is the same from run to run whatever else the machine is doing, and two
# versions of the schema can be compared on a noisy machine.
#
# It builds a throwaway cluster (initdb into a temporary directory), applies
# the migrations with the relay binary, then runs each workload in a
# single-user backend under callgrind, counting the statements' parse,
# planning and execution:
#
#   bulk    one INSERT … SELECT of 10,000 rows
#   copy    COPY of the same 10,000 rows from a file
#   single  2,000 one-row INSERT statements, each its own transaction
#
# Every row: topic, a 256-byte payload and one header, as the benchmarks
# write them. Usage (as root or the postgres user; make bench-insert):
#
#   internal/bench/insert_instructions.sh bin/outbox-relay
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
# count <sql file>: the instructions of its statements in a single-user backend.
count() {
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

printf '%-8s %14s %14s %7s\n' workload "outbox/row" "refloop/row" ratio
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
