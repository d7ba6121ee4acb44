#!/usr/bin/env bash
# ordered_claim.sh times ordered mode's claim of heads alone, with pgbench:
# the statement of relay/testdata/ordered/claim_heads.sql as the relay
# prepares it, on its generic plan, each execution in BEGIN … ROLLBACK so
# that every one claims the same rows; and, given a second file, that one
# too (another version of the statement, say
# git show <commit>:relay/testdata/ordered/claim_heads.sql), alternating.
#
# The scratch schema (ordered_claim_bench, dropped first) holds 200,000
# rows over 5,000 keys, interleaved as producers write them (row i has key
# i mod 5,000), 256-byte payloads, due at once; another relay holds the
# first four rows of half the keys in flight, as four relays draining such
# a burst do. Each claim then takes 1,000 rows: 250 heads, the next keys'
# oldest rows, each with a run of three.
#
# Usage: internal/bench/ordered_claim.sh bin/outbox-relay [rounds] [other.sql]
# with DATABASE_URL set (the Makefile's outbox_bench database, say).
set -euo pipefail
. "$(dirname "$0")/claim_statement.sh"
relay=${1:?usage: ordered_claim.sh bin/outbox-relay [rounds] [other.sql]}
rounds=${2:-4}
other=${3:-}
: "${DATABASE_URL:?set DATABASE_URL}"
schema=ordered_claim_bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

scratch_schema "$relay" "$schema"
psql "$DATABASE_URL" -qc "UPDATE $schema.relay_mode SET mode = 'ordered'"
keyed_rows "$schema"
psql "$DATABASE_URL" -q >/dev/null <<SQL
UPDATE $schema.messages SET leased_by = 'r2', leased_until = now() + interval '1 hour', claim_seq = 1, attempts = 1
 WHERE id IN (SELECT id FROM $schema.messages ORDER BY id LIMIT 20000) AND (id - 1) % 5000 < 2500;
SQL

# statement SQL OUT: the claim of heads in SQL, as a pgbench script.
statement() {
	claim_script "$schema" "$1" "$2" \
		-e "s/@keys_in_flight::jsonb/'{}'::jsonb/g" \
		-e "s/@mark_after::interval/'100 milliseconds'::interval/g" \
		-e "s/@lock_wait/'100ms'/g" \
		-e "s/@heads_lock/'$schema'/g" \
		-e "s/@walk/250/g"
}
statement relay/testdata/ordered/claim_heads.sql "$work/this.sql"
variants=this
if [ -n "$other" ]; then
	statement "$other" "$work/other.sql"
	variants="this other"
fi

echo "rows one claim leases: $(psql "$DATABASE_URL" -tA -f "$work/this.sql" | grep -c '^[0-9]')"
for round in $(seq "$rounds"); do
	for variant in $variants; do
		ms=$(pgbench -n -M prepared -t 100 -r -f "$work/$variant.sql" "$DATABASE_URL" 2>&1 | awk '/^ +[0-9.]+ +[0-9]+ +WITH/ {print $1}')
		echo "round $round: $([ $variant = this ] && echo "the claim of relay/testdata" || echo "the claim of $other"): $ms ms"
	done
done
psql "$DATABASE_URL" -qc "SET client_min_messages = warning" -c "DROP SCHEMA $schema CASCADE"
