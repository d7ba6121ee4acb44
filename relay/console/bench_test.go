package console_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/relay/admin"
	"github.com/outbox-relay/outbox-relay/relay/console"
)

// BenchmarkPages times every page of the console through its handler,
// reading an outbox the size the console is made for: 5 million archived
// rows (a week's deliveries at about 8 rows a second), 100,000 dead
// letters and 20,000 pending rows (make bench-console; docs/benchmarks.md,
// "Console"). The requirement is that each page answers in under 200 ms.
//
// The outbox is the schema console_bench of TEST_DATABASE_URL. Seeding it
// takes minutes, so it is kept between runs (with the marker table
// console_bench_seed) and reused when it is at the latest migration and
// holds the expected rows; -console-reseed seeds it again. A reused
// archive is first brought up to now, as the relays and the retention
// would have: the deliveries since the last run are appended at the same
// rate and the rows older than a week deleted, so that the last hour,
// which the overview reads, always holds its ~30,000 rows.
func BenchmarkPages(b *testing.B) {
	databaseURL := os.Getenv("TEST_DATABASE_URL")
	if databaseURL == "" {
		b.Fatal("BenchmarkPages needs TEST_DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable): " +
			"it seeds and keeps the schema " + benchSchema + " there")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		b.Fatalf("connect to TEST_DATABASE_URL: %v", err)
	}
	defer conn.Close(ctx)
	prepareBenchSchema(ctx, b, conn)
	target := pickTargets(ctx, b, conn)

	pool := benchPool(ctx, b, databaseURL)
	defer pool.Close()
	adm, err := admin.New(pool, benchSchema)
	if err != nil {
		b.Fatal(err)
	}
	database := "TEST_DATABASE_URL"
	if u, err := url.Parse(databaseURL); err == nil && u.Host != "" {
		database = u.Host + u.Path
	}
	outboxes := []console.Outbox{{Database: database, Schema: benchSchema, Admin: adm}}
	h, err := console.New(console.Config{
		Outboxes: func(context.Context) []console.Outbox { return outboxes },
		Served:   "BenchmarkPages",
	})
	if err != nil {
		b.Fatal(err)
	}

	o := console.PrefixDefault + "/o/-/" + benchSchema + "/"
	group := url.Values{"reason": {target.reason}, "error": {target.errorText}}
	pages := []struct{ name, path string }{
		{"overview", console.PrefixDefault + "/"},
		{"outbox", o},
		{"horizon", console.PrefixDefault + "/horizon"},
		{"dead-groups", o + "dead"},
		{"dead-group-letters", o + "dead/letters?" + group.Encode()},
		{"dead-letter", o + "dead/" + fmt.Sprint(target.letter)},
		{"key", o + "key?" + url.Values{"key": {target.key}}.Encode()},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			servePage(b, h, p.path) // first plans, statement cache, page cache
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				servePage(b, h, p.path)
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(millis(percentile(took, 0.50)), "p50-ms")
			b.ReportMetric(millis(percentile(took, 0.99)), "p99-ms")
		})
	}
}

// servePage serves path through h and fails b unless the page answers 200.
func servePage(b *testing.B, h http.Handler, path string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		body := rec.Body.String()
		if len(body) > 2000 {
			body = body[:2000] + "…"
		}
		b.Fatalf("GET %s: status %d, want 200:\n%s", path, rec.Code, body)
	}
}

// percentile is the nearest-rank p-quantile of the sorted times: of 20
// requests, p50 is the 10th fastest and p99 the slowest.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchPool is the console's pool as the binary opens it (internal/cli:
// openPool with adminPoolSize): two connections, JIT turned off on each
// after it connects.
func benchPool(ctx context.Context, b *testing.B, databaseURL string) *pgxpool.Pool {
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = 2
	pc.ConnConfig.RuntimeParams["application_name"] = benchSchema
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, _ = c.Exec(ctx, "SET jit = off")
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		b.Fatal(err)
	}
	return pool
}

var reseed = flag.Bool("console-reseed", false, "BenchmarkPages: drop the schema "+benchSchema+" and seed it again")

// The outbox BenchmarkPages reads.
const (
	benchSchema = "console_bench"
	// benchShape changes whenever the seeding below does: a schema seeded
	// by another shape is seeded again.
	benchShape = 1

	archiveRows = 5_000_000
	// archiveBatch is how many archived rows one INSERT … SELECT writes.
	archiveBatch = 1_000_000
	// archiveSpan is the archive's retention (RELAY_ARCHIVE_RETENTION's
	// default): the rows are delivered evenly over it, one every
	// archiveStep, about 30,000 in the last hour.
	archiveSpan = 7 * 24 * time.Hour
	archiveStep = archiveSpan / archiveRows
	deadRows    = 100_000
	// deadSpan is how far back the dead letters failed, evenly.
	deadSpan    = 3 * 24 * time.Hour
	deadStep    = deadSpan / deadRows
	pendingRows = 20_000
	// benchKey is the key the key page shows: one of the thousand keys
	// (order-0 … order-999) with twice the traffic of the others, about
	// 50 archived rows, 5 dead letters and 2 pending rows.
	benchKey = "order-42"
	// catchUpAtMost is the longest absence after which a kept archive is
	// brought up to now rather than seeded again.
	catchUpAtMost = 24 * time.Hour
)

// q fills {s} with the bench schema, quoted.
func q(sql string) string { return strings.ReplaceAll(sql, "{s}", migrations.Quote(benchSchema)) }

// benchTopics are the rows' topics (1 + n % 12).
const benchTopics = `(ARRAY['orders.created', 'orders.paid', 'orders.shipped', 'orders.cancelled', 'payments.captured', 'payments.refund',
        'invoices.issued', 'customers.updated', 'inventory.reserved', 'inventory.released', 'notifications.email', 'shipments.tracking'])`

// insertArchive appends the archived rows n = $1 … $2, the nth delivered
// at $3 + (n - 1) × $4 (ids n, or from the hot table's sequence when $5,
// as rows archived after the pending ones). Half are keyed, 99 keyed rows
// in 100 spread evenly over the keys order-0 … order-99999 (about 25
// each) and the hundredth over the thousand keys order-0 … order-999,
// which so have about 50 each.
// Payloads are JSON text of 150 to 250 bytes, nine rows in ten have two
// headers, idempotency keys are unique (a third the producer's own, the
// rest UUIDs as the insert guard generates them), one row in 100 was a
// duplicate, one in 50 took several attempts, one in five went to a named
// destination.
var insertArchive = q(`
INSERT INTO {s}.archive (id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, delivered_at, duplicate)
SELECT CASE WHEN $5::bool THEN nextval('{s}.messages_id_seq') ELSE g.n END,
       r.topic,
       convert_to(rpad(format('{"type":"%s","order":"order-%s","seq":%s,"amount_cents":%s,"currency":"EUR","note":"',
                              r.topic, g.n % 100000, g.n, (g.n * 7919) % 250000), 150 + (g.n % 97)::int, r.h) || '"}', 'UTF8'),
       CASE WHEN g.n % 2 = 0 THEN 'order-' || CASE WHEN (g.n / 2) % 100 = 0 THEN (g.n / 200) % 1000 ELSE ((g.n / 2) * 7919) % 100000 END END,
       CASE WHEN g.n % 10 <> 0 THEN jsonb_build_object('content-type', 'application/json', 'traceparent', '00-' || r.h || '-' || left(r.h, 16) || '-01') END,
       CASE WHEN g.n % 3 = 0 THEN 'evt-' || g.n ELSE md5('idempotency-' || g.n)::uuid::text END,
       CASE WHEN g.n % 5 = 0 THEN 'billing-webhook' END,
       r.at - (20 + g.n % 480) * interval '1 millisecond' - CASE WHEN g.n % 50 = 7 THEN interval '45 seconds' ELSE interval '0' END,
       CASE WHEN g.n % 50 = 7 THEN 2 + (g.n % 3)::int ELSE 1 END,
       r.at,
       g.n % 100 = 37
  FROM generate_series($1::bigint, $2::bigint) AS g(n)
 CROSS JOIN LATERAL (SELECT md5(g.n::text) AS h, ` + benchTopics + `[1 + g.n % 12] AS topic,
                            $3::timestamptz + (g.n - 1) * $4::interval AS at) AS r`)

// insertDead writes the dead letters n = 1 … $3 (ids $4 + n), the nth
// failed at $1 + (n - 1) × $2. Their errors are 25 recurring causes, each
// with its reason, the most frequent a fifth of the letters and the rarest
// 2% (cause floor(25 x²) for x spread evenly), and one letter in 50 has an
// error of its own, naming its id. Half are keyed as the archive is, the
// keys order-0 … order-999 with about 5 letters each. Payloads are JSON
// text of 100 to 2,000 bytes; one letter in 500 has a binary payload, and
// ten have 1 MiB ones (five hex text, five binary).
var insertDead = q(`
WITH causes (i, reason, error, destination) AS (VALUES
    (0, 'permanent', 'webhook: HTTP 422 for topic payments.refund', NULL),
    (1, 'exhausted', 'nats: publish orders.created: nats: timeout waiting for JetStream ack', NULL),
    (2, 'permanent', 'webhook: HTTP 400 for topic orders.created', NULL),
    (3, 'exhausted', 'webhook: HTTP 503 for topic invoices.issued', NULL),
    (4, 'no_sink', 'no sink named "billing-v2"', 'billing-v2'),
    (5, 'exhausted', 'kafka: produce to orders.paid: NOT_ENOUGH_REPLICAS: Messages are rejected since there are fewer in-sync replicas than required.', NULL),
    (6, 'permanent', 'kafka: produce to shipments.tracking: MESSAGE_TOO_LARGE', NULL),
    (7, 'exhausted', 'webhook: Post "https://hooks.example.com/orders": context deadline exceeded (Client.Timeout exceeded while awaiting headers)', NULL),
    (8, 'permanent', 'webhook: HTTP 410 for topic customers.updated', NULL),
    (9, 'cancelled', 'cancelled by operator: order voided', NULL),
    (10, 'exhausted', 'rabbitmq: publish to exchange events: Exception (504) Reason: "channel/connection is not open"', NULL),
    (11, 'permanent', 'headers: header "x-tenant" is not a string', NULL),
    (12, 'exhausted', 'webhook: HTTP 429 for topic notifications.email', NULL),
    (13, 'no_sink', 'no sink named "legacy-erp"', 'legacy-erp'),
    (14, 'permanent', 'webhook: HTTP 413 for topic inventory.reserved', NULL),
    (15, 'exhausted', 'sqs: SendMessageBatch: ServiceUnavailable: Service Unavailable', NULL),
    (16, 'permanent', 'nats: publish payments.captured: nats: maximum payload exceeded', NULL),
    (17, 'cancelled', 'cancelled by operator: duplicate import', NULL),
    (18, 'exhausted', 'webhook: Post "https://erp.internal:8443/events": dial tcp 10.0.4.17:8443: connect: connection refused', NULL),
    (19, 'permanent', 'webhook: HTTP 404 for topic inventory.released', NULL),
    (20, 'exhausted', 'pubsub: Publish: rpc error: code = Unavailable desc = The service was unable to fulfill your request.', NULL),
    (21, 'permanent', 'webhook: HTTP 401 for topic payments.refund', NULL),
    (22, 'exhausted', 'redis: XADD events: READONLY You can''t write against a read only replica.', NULL),
    (23, 'permanent', 'sns: PublishBatch: InvalidParameter: Message too long', NULL),
    (24, 'cancelled', 'cancelled by operator: customer deleted', NULL))
INSERT INTO {s}.dead_letters (id, topic, payload, key, headers, idempotency_key, destination, created_at, attempts, reason, error, failed_at, available_at)
SELECT $4::bigint + g.n,
       r.topic,
       CASE WHEN g.n % 10000 = 4321 AND (g.n / 10000) % 2 = 1
                THEN decode((SELECT string_agg(md5(g.n || '-' || s), '') FROM generate_series(1, 65536) AS s), 'hex')
            WHEN g.n % 10000 = 4321
                THEN convert_to((SELECT string_agg(md5(g.n || '-' || s), '') FROM generate_series(1, 32768) AS s), 'UTF8')
            WHEN g.n % 500 = 13
                THEN decode(repeat(r.h, 4 + (g.n % 20)::int), 'hex')
            ELSE convert_to(rpad(format('{"type":"%s","order":"order-%s","note":"', r.topic, g.n % 100000),
                                 100 + ((g.n * 7919) % 1900)::int, r.h) || '"}', 'UTF8')
       END,
       CASE WHEN g.n % 2 = 0 THEN 'order-' || CASE WHEN (g.n / 2) % 10 = 0 THEN (g.n / 20) % 1000 ELSE ((g.n / 2) * 7919) % 100000 END END,
       CASE WHEN g.n % 10 <> 0 THEN jsonb_build_object('content-type', 'application/json', 'traceparent', '00-' || r.h || '-' || left(r.h, 16) || '-01') END,
       md5('dead-' || g.n)::uuid::text,
       coalesce(c.destination, CASE WHEN g.n % 5 = 0 THEN 'billing-webhook' END),
       r.at - CASE c.reason WHEN 'exhausted' THEN interval '2 hours' WHEN 'cancelled' THEN interval '10 minutes' ELSE interval '1 second' END
            - (g.n % 1000) * interval '1 millisecond',
       CASE c.reason WHEN 'exhausted' THEN 10 WHEN 'permanent' THEN 1 + (g.n % 2)::int WHEN 'no_sink' THEN 0 ELSE (g.n % 3)::int END,
       c.reason,
       CASE WHEN g.n % 50 = 17 THEN c.error || ' (request ' || left(r.h, 12) || ', dead letter ' || ($4::bigint + g.n) || ')' ELSE c.error END,
       r.at,
       CASE WHEN c.reason = 'cancelled' THEN r.at - interval '5 minutes' END
  FROM generate_series(1, $3::bigint) AS g(n)
 CROSS JOIN LATERAL (SELECT md5(g.n::text) AS h, ` + benchTopics + `[1 + g.n % 12] AS topic,
                            $1::timestamptz + (g.n - 1) * $2::interval AS at,
                            floor(25 * power(((g.n * 2654435761) % 1000003) / 1000003.0, 2))::int AS cause) AS r
  JOIN causes AS c ON c.i = r.cause`)

// insertPending writes $1 rows as producers do, through the insert guard
// (which sets id, created_at, available_at at the earliest now, attempts,
// the lease and dedup): half keyed (order-0 … order-999 with 2 rows each),
// half with the producer's idempotency key, one in ten delayed by up to an
// hour.
var insertPending = q(`
INSERT INTO {s}.messages (topic, payload, key, headers, idempotency_key, destination, available_at)
SELECT ` + benchTopics + `[1 + n % 12],
       convert_to(rpad(format('{"type":"%s","order":"order-%s","seq":%s,"currency":"EUR","note":"',
                              ` + benchTopics + `[1 + n % 12], n % 100000, n), 150 + (n % 97)::int, md5(n::text)) || '"}', 'UTF8'),
       CASE WHEN n % 2 = 0 THEN 'order-' || CASE WHEN (n / 2) % 5 = 0 THEN (n / 10) % 1000 ELSE ((n / 2) * 7919) % 100000 END END,
       CASE WHEN n % 10 <> 0 THEN jsonb_build_object('content-type', 'application/json', 'traceparent', '00-' || md5(n::text) || '-' || left(md5(n::text), 16) || '-01') END,
       CASE WHEN n % 2 = 0 THEN 'evt-pending-' || n END,
       CASE WHEN n % 5 = 0 THEN 'billing-webhook' END,
       CASE WHEN n % 10 = 3 THEN now() + (60 + n % 3600) * interval '1 second' ELSE now() END
  FROM generate_series(1, $1::bigint) AS n`)

// setBackoff puts one due row in eight (and the oldest row of benchKey)
// into backoff, as a relay's failed delivery leaves it (relay/admin's
// tests set rows so): attempts made, the last error, a retry up to 15
// minutes ahead.
var setBackoff = q(`
UPDATE {s}.messages
   SET attempts = 1 + id % 6, claim_seq = 1 + id % 6,
       last_error = (ARRAY['webhook: HTTP 503 for topic invoices.issued',
                           'nats: publish orders.created: nats: timeout waiting for JetStream ack',
                           'webhook: Post "https://hooks.example.com/orders": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
                           'kafka: produce to orders.paid: NOT_ENOUGH_REPLICAS: Messages are rejected since there are fewer in-sync replicas than required.'])[1 + id % 4],
       available_at = now() + (30 + id % 900) * interval '1 second'
 WHERE available_at <= clock_timestamp()
   AND (id % 8 = 3 OR id = (SELECT min(id) FROM {s}.messages WHERE key = '` + benchKey + `'))`)

// setInFlight leases 500 due rows to a relay, as its claim does.
var setInFlight = q(`
UPDATE {s}.messages
   SET attempts = attempts + 1, claim_seq = claim_seq + 1, leased_by = 'relay-7f3a', leased_until = now() + interval '30 seconds'
 WHERE id IN (SELECT id FROM {s}.messages
               WHERE last_error IS NULL AND available_at <= clock_timestamp()
               ORDER BY available_at, id LIMIT 500)`)

// insertRelays registers three live relays and one gone since yesterday.
var insertRelays = q(`
INSERT INTO {s}.relays (id, version, mode, started_at, last_seen, notify, default_sink, sinks) VALUES
    ('relay-7f3a', 'v1.9.0', 'unordered', now() - interval '3 days', now() - interval '2 seconds', true, 'nats', '{nats,billing-webhook}'),
    ('relay-91c2', 'v1.9.0', 'unordered', now() - interval '3 days', now() - interval '5 seconds', true, 'nats', '{nats,billing-webhook}'),
    ('relay-d40e', 'v1.9.0', 'unordered', now() - interval '2 days', now() - interval '8 seconds', true, 'nats', '{nats,billing-webhook}'),
    ('relay-0b77', 'v1.8.2', 'unordered', now() - interval '9 days', now() - interval '20 hours', false, 'nats', '{nats}')`)

// refreshRelays makes the live relays' heartbeats recent again.
var refreshRelays = q(`
UPDATE {s}.relays SET last_seen = now() - CASE id WHEN 'relay-7f3a' THEN interval '2 seconds' WHEN 'relay-91c2' THEN interval '5 seconds' ELSE interval '8 seconds' END
 WHERE id <> 'relay-0b77'`)

// vacuumTables is what autovacuum (off on the test server) would have done.
var vacuumTables = q(`VACUUM (ANALYZE) {s}.messages, {s}.archive, {s}.dead_letters, {s}.delivered_keys, {s}.relays, {s}.relay_mode`)

// createSeedMarker makes the marker of a finished seeding: how many rows
// of each table,
// how the archive is spread (for catching it up) and how long it took.
var createSeedMarker = q(`
CREATE TABLE {s}.console_bench_seed (
    shape        integer     NOT NULL,
    archive      bigint      NOT NULL,
    dead         bigint      NOT NULL,
    pending      bigint      NOT NULL,
    archive_from timestamptz NOT NULL,
    archive_last bigint      NOT NULL,
    seeded_at    timestamptz NOT NULL DEFAULT now(),
    seed_seconds float8      NOT NULL
)`)

// seedMarker is the marker's row.
type seedMarker struct {
	Shape       int32     `db:"shape"`
	Archive     int64     `db:"archive"`
	Dead        int64     `db:"dead"`
	Pending     int64     `db:"pending"`
	ArchiveFrom time.Time `db:"archive_from"`
	ArchiveLast int64     `db:"archive_last"`
	SeededAt    time.Time `db:"seeded_at"`
	SeedSeconds float64   `db:"seed_seconds"`
}

// prepareBenchSchema makes the bench schema ready: kept, caught up to now,
// when it is at the latest migration and its marker says it holds the
// expected rows; seeded anew otherwise, or with -console-reseed.
func prepareBenchSchema(ctx context.Context, b *testing.B, conn *pgx.Conn) {
	why := "-console-reseed"
	if !*reseed {
		m, reason := keptSeed(ctx, conn)
		if m != nil {
			if reason = catchUp(ctx, b, conn, *m); reason == "" {
				return
			}
		}
		why = reason
	}
	start := time.Now()
	steps := seed(ctx, b, conn)
	b.Logf("seeded %s (%s) in %s: %s", benchSchema, why, time.Since(start).Round(time.Second), steps)
}

// keptSeed returns the kept schema's marker, or nil and why it cannot be
// kept.
func keptSeed(ctx context.Context, conn *pgx.Conn) (*seedMarker, string) {
	v, err := migrations.CurrentVersion(ctx, conn, benchSchema)
	switch {
	case err != nil:
		return nil, err.Error()
	case v == 0:
		return nil, "no schema yet"
	case v != migrations.Latest():
		return nil, fmt.Sprintf("schema at migration %d, not %d", v, migrations.Latest())
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, benchSchema+".console_bench_seed").Scan(&exists); err != nil {
		return nil, err.Error()
	}
	if !exists {
		return nil, "no seed marker: an earlier seeding did not finish"
	}
	rows, _ := conn.Query(ctx, q(`SELECT * FROM {s}.console_bench_seed`))
	m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[seedMarker])
	switch {
	case err != nil:
		return nil, "seed marker unreadable: " + err.Error()
	case m.Shape != benchShape:
		return nil, fmt.Sprintf("seeded with shape %d, not %d", m.Shape, benchShape)
	case m.Archive != archiveRows || m.Dead != deadRows || m.Pending != pendingRows:
		return nil, fmt.Sprintf("holds %d archived, %d dead, %d pending", m.Archive, m.Dead, m.Pending)
	}
	return m, ""
}

// catchUp brings a kept outbox up to now, as the relays and the archive's
// retention would have: the rows delivered since the last run appended to
// the archive at the same rate and the rows older than a week deleted
// (exactly as many), the hot table written again (its ages, retries and
// leases from now), the live relays' heartbeats recent, in one
// transaction with the marker; then vacuumed. It returns why the schema
// must be seeded again instead, or "".
func catchUp(ctx context.Context, b *testing.B, conn *pgx.Conn, m seedMarker) string {
	start := time.Now()
	var last int64
	err := conn.QueryRow(ctx, `SELECT floor(extract(epoch FROM now() - $1::timestamptz) / extract(epoch FROM $2::interval))::bigint + 1`,
		m.ArchiveFrom, archiveStep).Scan(&last)
	if err != nil {
		return err.Error()
	}
	behind := last - m.ArchiveLast
	if time.Duration(behind)*archiveStep > catchUpAtMost {
		return fmt.Sprintf("the archive is %s behind", (time.Duration(behind) * archiveStep).Round(time.Minute))
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if behind > 0 {
			ins, err := tx.Exec(ctx, insertArchive, m.ArchiveLast+1, last, m.ArchiveFrom, archiveStep, true)
			if err != nil {
				return fmt.Errorf("append to the archive: %w", err)
			}
			del, err := tx.Exec(ctx, q(`DELETE FROM {s}.archive WHERE delivered_at < $1::timestamptz + ($2::bigint - $3::bigint) * $4::interval`),
				m.ArchiveFrom, last, archiveRows, archiveStep)
			if err != nil {
				return fmt.Errorf("expire the archive: %w", err)
			}
			if ins.RowsAffected() != del.RowsAffected() {
				return fmt.Errorf("appended %d archived rows but expired %d", ins.RowsAffected(), del.RowsAffected())
			}
			if _, err := tx.Exec(ctx, q(`UPDATE {s}.console_bench_seed SET archive_last = $1`), last); err != nil {
				return err
			}
		}
		// The hot table is written again, so that its rows' ages, retries
		// and leases are what the seeding left, from now.
		if _, err := tx.Exec(ctx, q(`TRUNCATE {s}.messages`)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertPending, pendingRows); err != nil {
			return err
		}
		for _, s := range []string{setBackoff, setInFlight, refreshRelays} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "catching up failed: " + err.Error()
	}
	if _, err := conn.Exec(ctx, vacuumTables); err != nil {
		b.Fatalf("vacuum %s: %v", benchSchema, err)
	}
	b.Logf("kept %s (seeded %s in %.0f s); caught up by %d archived rows (%s of deliveries) in %s",
		benchSchema, m.SeededAt.UTC().Format(time.RFC3339), m.SeedSeconds, behind, (time.Duration(behind) * archiveStep).Round(time.Second),
		time.Since(start).Round(time.Millisecond))
	return ""
}

// seed drops the bench schema, migrates it anew and fills it, and
// returns how long the main steps took.
func seed(ctx context.Context, b *testing.B, conn *pgx.Conn) string {
	start := time.Now()
	var steps []string
	step := func(what string, t time.Time) {
		steps = append(steps, fmt.Sprintf("%s %s", what, time.Since(t).Round(100*time.Millisecond)))
	}
	exec := func(what, sql string, args ...any) {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("seed %s: %s: %v", benchSchema, what, err)
		}
	}
	exec("drop", `DROP SCHEMA IF EXISTS `+migrations.Quote(benchSchema)+` CASCADE`)
	if _, err := migrations.Apply(ctx, conn, benchSchema); err != nil {
		b.Fatalf("migrate %s: %v", benchSchema, err)
	}
	// The rows are the database's to lose until the marker is written.
	exec("synchronous_commit", `SET synchronous_commit = off`)

	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		b.Fatal(err)
	}
	t := time.Now()
	// The archive's last row is delivered one step before now.
	archiveFrom := now.Add(-archiveSpan)
	for from := int64(1); from <= archiveRows; from += archiveBatch {
		to := min(from+archiveBatch-1, archiveRows)
		exec(fmt.Sprintf("archive %d–%d", from, to), insertArchive, from, to, archiveFrom, archiveStep, false)
	}
	step("archive", t)
	t = time.Now()
	exec("dead letters", insertDead, now.Add(-deadSpan), deadStep, deadRows, archiveRows)
	step("dead letters", t)
	t = time.Now()
	// Pending rows come after every archived row and dead letter, as the
	// sequence would have given them.
	exec("sequence", q(`SELECT setval('{s}.messages_id_seq', $1::bigint)`), archiveRows+deadRows)
	exec("pending", insertPending, pendingRows)
	exec("backoff", setBackoff)
	exec("in flight", setInFlight)
	exec("relays", insertRelays)
	step("pending and relays", t)
	t = time.Now()
	exec("vacuum analyze", vacuumTables)
	step("vacuum analyze", t)

	var archived, dead, pending int64
	err := conn.QueryRow(ctx, q(`SELECT (SELECT count(*) FROM {s}.archive), (SELECT count(*) FROM {s}.dead_letters), (SELECT count(*) FROM {s}.messages)`)).
		Scan(&archived, &dead, &pending)
	if err != nil {
		b.Fatal(err)
	}
	if archived != archiveRows || dead != deadRows || pending != pendingRows {
		b.Fatalf("seeded %d archived, %d dead, %d pending; want %d, %d, %d", archived, dead, pending, archiveRows, deadRows, pendingRows)
	}
	exec("marker", createSeedMarker)
	exec("marker row", q(`INSERT INTO {s}.console_bench_seed (shape, archive, dead, pending, archive_from, archive_last, seed_seconds)
	                      VALUES ($1, $2, $3, $4, $5, $6, $7)`),
		benchShape, archived, dead, pending, archiveFrom, int64(archiveRows), time.Since(start).Seconds())
	return strings.Join(steps, ", ")
}

// benchTargets are the pages' arguments picked from the seeded rows.
type benchTargets struct {
	key               string
	reason, errorText string
	letter            int64
}

// pickTargets picks the largest dead-letter group, one of the 1 MiB dead
// letters (a binary one: the page shows its hex dump) and benchKey, and
// logs what each holds and the schema's size.
func pickTargets(ctx context.Context, b *testing.B, conn *pgx.Conn) benchTargets {
	t := benchTargets{key: benchKey}
	var groupSize int64
	err := conn.QueryRow(ctx, q(`SELECT reason, error, count(*) FROM {s}.dead_letters GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT 1`)).
		Scan(&t.reason, &t.errorText, &groupSize)
	if err != nil {
		b.Fatalf("find the largest dead-letter group: %v", err)
	}
	var letterBytes int64
	err = conn.QueryRow(ctx, q(`SELECT id, octet_length(payload) FROM {s}.dead_letters
	                             WHERE octet_length(payload) >= 1048576 AND encode(substring(payload FROM 1 FOR 32), 'escape') !~ '^[0-9a-f]{32}$'
	                             ORDER BY id LIMIT 1`)).Scan(&t.letter, &letterBytes)
	if err != nil {
		b.Fatalf("find a 1 MiB dead letter: %v", err)
	}
	var archived, dead, pending int64
	err = conn.QueryRow(ctx, q(`SELECT (SELECT count(*) FROM {s}.archive WHERE key = $1), (SELECT count(*) FROM {s}.dead_letters WHERE key = $1),
	                                   (SELECT count(*) FROM {s}.messages WHERE key = $1)`), t.key).Scan(&archived, &dead, &pending)
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	if err := conn.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class AS c
	                               JOIN pg_namespace AS n ON n.oid = c.relnamespace
	                              WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')`, benchSchema).Scan(&size); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: %.2f GB; largest dead-letter group %s %q (%d letters); dead letter %d (%d bytes); key %s: %d archived, %d dead, %d pending",
		benchSchema, float64(size)/1e9, t.reason, t.errorText, groupSize, t.letter, letterBytes, t.key, archived, dead, pending)
	return t
}
