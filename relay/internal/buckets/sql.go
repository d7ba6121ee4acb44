package buckets

import "strings"

// The statements of the lease protocol. {schema} is the quoted schema
// (render); arguments are named (pgx.StrictNamedArgs).

// queryLock serializes the rounds of a schema's relays (@lock_name names
// the schema), in their transactions. A round is a few round trips: a relay
// frozen in the middle of one (SIGSTOP, a VM pause, a cut network the
// server has not noticed) would hold the lock, and the rows of the buckets
// it renewed, until its connection died, and every other relay's round
// would wait behind it until their leases ran out. The server ends such a
// session after @idle_ms milliseconds idle in the transaction, which
// releases both.
const queryLock = `
SELECT set_config('idle_in_transaction_session_timeout', @idle_ms::text, true),
       pg_advisory_xact_lock(hashtext(@lock_name))`

// queryRenew extends the leases of the buckets relay @relay_id still holds
// (their leases have not run out) that end within @renew_within to @lease
// from now, and returns every bucket it holds with its epoch (as the
// statement's snapshot sees them, before the extension: a lease that has
// not run out then has not when the statement ends either).
const queryRenew = `
WITH renewed AS (
    UPDATE {schema}.buckets SET lease_until = now() + @lease::interval
     WHERE owner = @relay_id AND lease_until > now() AND lease_until <= now() + @renew_within::interval
)
SELECT bucket, epoch FROM {schema}.buckets
 WHERE owner = @relay_id AND lease_until > now()`

// queryLive returns the relays in partitioned mode seen within @alive, by
// id: the replicas that share the buckets.
const queryLive = `
SELECT id FROM {schema}.relays
 WHERE mode = 'partitioned' AND last_seen > now() - @alive::interval
 ORDER BY id`

// queryAcquire gives relay @relay_id, for @lease from now, up to @want
// buckets that nobody holds (released, or their lease ran out), each under
// a new epoch, and returns them with their epochs.
const queryAcquire = `
UPDATE {schema}.buckets AS b
   SET owner = @relay_id, epoch = b.epoch + 1, lease_until = now() + @lease::interval, changed_at = now()
 WHERE b.bucket = ANY (ARRAY(
       SELECT bucket FROM {schema}.buckets
        WHERE owner IS NULL OR lease_until <= now()
        ORDER BY bucket
        LIMIT @want
          FOR UPDATE))
RETURNING b.bucket, b.epoch`

// queryRelease gives up the buckets @buckets that relay @relay_id holds
// under the epochs @epochs: nobody owns them, and another relay may
// acquire them at once.
const queryRelease = `
UPDATE {schema}.buckets AS b
   SET owner = NULL, lease_until = now(), changed_at = now()
  FROM unnest(@buckets::int[], @epochs::bigint[]) AS r(bucket, epoch)
 WHERE b.bucket = r.bucket AND b.epoch = r.epoch AND b.owner = @relay_id
RETURNING b.bucket`

// queryReset frees every bucket, when the schema leaves partitioned mode.
const queryReset = `
UPDATE {schema}.buckets SET owner = NULL, lease_until = '-infinity', changed_at = now() WHERE owner IS NOT NULL`

// render fills the {schema} slot of q with the quoted schema.
func render(q, quotedSchema string) string {
	return strings.ReplaceAll(q, "{schema}", quotedSchema)
}

// Statements returns the protocol's statements for the quoted schema, by
// name, for the relay's golden files.
func Statements(quotedSchema string) map[string]string {
	return map[string]string{
		"buckets_lock":    queryLock,
		"buckets_renew":   render(queryRenew, quotedSchema),
		"buckets_live":    render(queryLive, quotedSchema),
		"buckets_acquire": render(queryAcquire, quotedSchema),
		"buckets_release": render(queryRelease, quotedSchema),
		"buckets_reset":   render(queryReset, quotedSchema),
	}
}

// ResetStatement returns the statement that frees every bucket of the
// quoted schema, for a switch out of partitioned mode.
func ResetStatement(quotedSchema string) string { return render(queryReset, quotedSchema) }
