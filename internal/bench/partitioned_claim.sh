#!/usr/bin/env bash
# partitioned_claim.sh times partitioned mode's claim statement alone, with
# pgbench, told which keys have rows in flight in the relay
# (@keys_in_flight) and told none: the statement of
# relay/testdata/partitioned/claim.sql as the relay prepares it, on its
# generic plan, each execution in BEGIN … ROLLBACK so that every one claims
# the same rows.
#
# The scratch schema (partitioned_claim_bench, dropped first) holds 200,000
# rows over 5,000 keys, interleaved as producers write them (row i has key
# i mod 5,000), 256-byte payloads, due at once; the relay owns 16 buckets
# of 64, and holds the oldest 3,000 rows of them in flight, as a relay
# draining such a burst does. Each claim then takes 1,000 rows (16 shares
# of 63), one of each of 1,000 keys, every key with a row in flight.
#
# Usage: internal/bench/partitioned_claim.sh bin/outbox-relay [rounds]
# with DATABASE_URL set (the Makefile's outbox_bench database, say).
set -euo pipefail
. "$(dirname "$0")/claim_statement.sh"
relay=${1:?usage: partitioned_claim.sh bin/outbox-relay [rounds]}
rounds=${2:-4}
: "${DATABASE_URL:?set DATABASE_URL}"
schema=partitioned_claim_bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

scratch_schema "$relay" "$schema"
psql "$DATABASE_URL" -q >/dev/null <<SQL
SET client_min_messages = warning;
UPDATE $schema.relay_mode SET mode = 'partitioned';
SELECT $schema.messages_apply_mode();
UPDATE $schema.buckets SET owner = CASE WHEN bucket < 16 THEN 'r1' ELSE 'r2' END, epoch = 1, lease_until = now() + interval '1 day';
SQL
keyed_rows "$schema"
psql "$DATABASE_URL" -q >/dev/null <<SQL
UPDATE $schema.messages SET leased_by = 'r1', leased_until = now() + interval '1 hour', claim_seq = 1, attempts = 1
 WHERE id IN (SELECT id FROM $schema.messages WHERE $schema.messages_bucket(key, id) < 16 ORDER BY available_at, id LIMIT 3000);
SQL
psql "$DATABASE_URL" -tAc "SELECT coalesce(jsonb_object_agg(key, 0), '{}')::text FROM (SELECT DISTINCT key FROM $schema.messages WHERE leased_by = 'r1') AS k" >"$work/keys.json"
echo '{}' >"$work/none.json"

# statement KEYS_FILE OUT: the claim's pgbench script, told the keys in
# flight in KEYS_FILE.
statement() {
	claim_script "$schema" relay/testdata/partitioned/claim.sql "$2" \
		-e "s/@keys_in_flight::jsonb/'$(sed 's/[&/\]/\\&/g' "$1")'::jsonb/g" \
		-e "s/@buckets::int\[\]/'{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}'::int[]/g" \
		-e "s/@epochs::bigint\[\]/array_fill(1::bigint, ARRAY[16])/g" \
		-e "s/@shares::int\[\]/array_fill(63, ARRAY[16])/g"
}
statement "$work/none.json" "$work/none.sql"
statement "$work/keys.json" "$work/keys.sql"

echo "keys in flight named: $(psql "$DATABASE_URL" -tAc "SELECT count(*) FROM jsonb_object_keys('$(cat "$work/keys.json")'::jsonb)")"
for round in $(seq "$rounds"); do
	for variant in keys none; do
		ms=$(pgbench -n -M prepared -t 100 -r -f "$work/$variant.sql" "$DATABASE_URL" 2>&1 | awk '/^ +[0-9.]+ +[0-9]+ +WITH/ {print $1}')
		echo "round $round: claim told $([ $variant = keys ] && echo 'the keys in flight' || echo 'no key'): $ms ms"
	done
done
psql "$DATABASE_URL" -qc "SET client_min_messages = warning" -c "DROP SCHEMA $schema CASCADE"
