# claim_statement.sh is sourced by the scripts that time a claim statement
# alone with pgbench (partitioned_claim.sh, ordered_claim.sh): the scratch
# schema and rows they claim, and the statement as a pgbench script.

# scratch_schema RELAY SCHEMA makes SCHEMA afresh (dropped first if it is
# there) with the migrations of the binary RELAY.
scratch_schema() {
	psql "$DATABASE_URL" -qc "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS $2 CASCADE"
	"$1" migrate --schema "$2" >/dev/null
}

# keyed_rows SCHEMA inserts 200,000 rows over 5,000 keys into SCHEMA's
# outbox, interleaved as producers write them (row i has key i mod 5,000),
# 256-byte payloads, due at once, and analyzes the table.
keyed_rows() {
	psql "$DATABASE_URL" -q >/dev/null <<SQL
SET client_min_messages = warning;
INSERT INTO $1.messages (topic, payload, key, headers)
SELECT 'events.a', decode(repeat('ab', 256), 'hex'), 'key-' || (i % 5000), '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
  FROM generate_series(1, 200000) AS i;
VACUUM ANALYZE $1.messages;
SQL
}

# claim_script SCHEMA SQL OUT [SED_ARGS...] writes to OUT a pgbench script
# that runs the claim statement in the file SQL (a golden file of
# relay/testdata) on SCHEMA as the relay prepares it, on its generic plan,
# in BEGIN … ROLLBACK so that every execution claims the same rows: the
# arguments every claim takes filled in as relay 'r1' with its defaults, the
# mode's own by SED_ARGS (-e expressions). It fails naming any argument
# left unfilled.
claim_script() {
	local schema=$1 sql=$2 out=$3
	shift 3
	{
		echo 'BEGIN;'
		echo "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true);"
		sed -e "s/\"outbox\"/$schema/g" \
			"$@" \
			-e "s/@floor::timestamptz/'-infinity'::timestamptz/g" \
			-e "s/@id_floor::bigint/(SELECT min(id) FROM $schema.messages)::bigint/g" \
			-e "s/@passed_writers::text\[\]/'{}'::text[]/g" \
			-e "s/@passed_ids::bigint\[\]/'{}'::bigint[]/g" \
			-e "s/@payload_max::bigint/1048576::bigint/g" \
			-e "s/@byte_budget::bigint/67108864::bigint/g" \
			-e "s/@oversized::bool/true/g" \
			-e "s/@closed_sinks::text\[\]/'{}'::text[]/g" \
			-e "s/@default_sink/'nats'/g" \
			-e "s/@lease::interval/'1 minute'::interval/g" \
			-e "s/@relay_id/'r1'/g" \
			-e "s/@limit/1000/g" \
			"$sql" | tr '\n' ' '
		echo ';'
		echo 'ROLLBACK;'
	} >"$out"
	if grep -q '@[a-z_]' "$out"; then
		echo "$(basename "$0"): an argument of the claim is not filled: $(grep -o '@[a-z_]*' "$out" | sort -u | tr '\n' ' ')" >&2
		exit 1
	fi
}
