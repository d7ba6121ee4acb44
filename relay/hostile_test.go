package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Rows are untrusted input: one producer's mistake or malice in a row must
// not stop, strand or misroute any other row.

func TestHostile_ProducersCannotWriteTheRelaysColumns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	relaytest.Start(t, b.db.Pool, cfg)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, attempts, claim_seq, leased_by, leased_until, last_error, created_at)
	              VALUES ('events.a', 'x', 'meddler', 2147483647, 2147483647, 'someone', 'infinity', 'forged', 'infinity')`)
	relaytest.InsertRows(t, b.db, 20, "events.a")
	relaytest.WaitDrained(t, b.db, 20*time.Second)
	var attempts int
	var createdAt time.Time
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT attempts, created_at FROM "+b.db.Table("archive")+" WHERE idempotency_key = 'meddler'").
		Scan(&attempts, &createdAt); err != nil {
		t.Fatalf("the meddling row was not delivered: %v", err)
	}
	if attempts != 1 || time.Since(createdAt) > time.Minute {
		t.Errorf("archived with attempts %d, created_at %s: want 1 and the insert time", attempts, createdAt)
	}
	relaytest.AssertStreamMatchesArchive(t, b.db, b.nats, stream, 21)
}

// A producer cannot forge a row's first error either: the guard resets it
// with the relay's other columns.
func TestHostile_ProducersCannotForgeTheFirstError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, first_error) VALUES ('events.a', 'x', 'forger', 'forged')`)
	if n := b.db.CountWhere(t, "messages_all", "idempotency_key = 'forger' AND first_error IS NULL"); n != 1 {
		t.Errorf("the forged first_error was kept")
	}
}

func TestHostile_KeysThatCannotTravelAreRefusedAtInsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ sql, want string }{
		{`INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('t', 'x', E'a\r\nX-Injected: 1')`, "idempotency_key"},
		{`INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('t', 'x', repeat('k', 201))`, "idempotency_key"},
		{`INSERT INTO %s.messages (topic, payload, key) VALUES ('t', 'x', E'order\n42')`, "key must be"},
		{`INSERT INTO %s.messages (topic, payload, available_at) VALUES ('t', 'x', 'infinity')`, "available_at"},
		{`INSERT INTO %s.messages (topic, payload) VALUES (repeat('t', 4100), 'x')`, "topic must be at most 255 bytes, not 4100"},
		{`INSERT INTO %s.messages (topic, payload) VALUES (repeat('é', 128), 'x')`, "topic must be at most 255 bytes, not 256"},
		{`INSERT INTO %s.messages (topic, payload, destination) VALUES ('t', 'x', repeat('d', 256))`, "destination must be at most 255 bytes"},
	} {
		_, err := b.db.Pool.Exec(context.Background(), strings.ReplaceAll(tc.sql, "%s", `"`+b.db.Name+`"`))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %s", tc.sql, err, tc.want)
		}
	}
	if n := b.db.Count(t, "messages_all"); n != 0 {
		t.Errorf("%d rows were accepted", n)
	}
}

// TestHostile_RowsThatSkippedTheGuardStopNothing writes hostile values with
// the insert guard skipped (a session with session_replication_role =
// replica, a restore, an old row): the claims survive, the others flow.
func TestHostile_RowsThatSkippedTheGuardStopNothing(t *testing.T) {
	t.Parallel()
	everyMode(t, testRowsThatSkippedTheGuardStopNothing)
}

func testRowsThatSkippedTheGuardStopNothing(t *testing.T, set func(*relay.Config)) {
	b := setup(t)
	cfg := b.config(t)
	set(&cfg)
	cfg.MaxAttempts = 3
	// The hostile rows share a key with good rows, which must not be
	// stranded behind them in the modes that keep a key's order.
	b.db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key, attempts, claim_seq, leased_by, leased_until, created_at) VALUES
	    ('events.a', 'x', 'k', 'max-attempts', 2147483647, 0, NULL, NULL, now()),
	    ('events.a', 'x', 'k', 'max-seq', 0, 2147483647, NULL, NULL, now()),
	    ('events.a', 'x', 'k', 'endless-lease', 1, 1, 'nobody', 'infinity', now()),
	    ('events.a', 'x', 'k', 'timeless', 0, 0, NULL, NULL, 'infinity')`)
	// The smallest id there is: the walks from the claim floor start at the
	// floor's time and the smallest id, and take a row there too.
	b.db.ExecAsRelay(t, `INSERT INTO %s.messages (id, topic, payload, key, idempotency_key) VALUES
	    (-9223372036854775808, 'events.a', 'x', 'k', 'smallest-id')`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'x', 'k')`)
	relaytest.InsertRows(t, b.db, 100, "events.a")
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.WaitDrained(t, b.db, 30*time.Second)
	delivered := relaytest.Archive(t, b.db, "true")
	for _, key := range []string{"max-seq", "endless-lease", "timeless", "smallest-id"} {
		if _, ok := delivered[key]; !ok {
			t.Errorf("row %s was not delivered", key)
		}
	}
	if got := len(delivered) + b.db.Count(t, "dead_letters"); got != 106 {
		t.Errorf("%d rows delivered or dead-lettered, want all 106", got)
	}
	if n := testutil.ToFloat64(cfg.Metrics.ClaimErrors); n != 0 {
		t.Errorf("%v claims failed", n)
	}
}

// TestHostile_PartsOverTheirLimitsAreDeadLetteredUnread writes rows, with
// the insert guard skipped, whose parts are larger than the relay reads
// (outbox/limits.go, RELAY_MAX_IN_FLIGHT_BYTES for the payload): each is
// dead-lettered alone, as permanent, naming the part and the limit, and
// the rows around it, one of its key too, are delivered.
func TestHostile_PartsOverTheirLimitsAreDeadLetteredUnread(t *testing.T) {
	t.Parallel()
	everyMode(t, testPartsOverTheirLimitsAreDeadLetteredUnread)
}

func testPartsOverTheirLimitsAreDeadLetteredUnread(t *testing.T, set func(*relay.Config)) {
	b := setup(t)
	cfg := b.config(t)
	set(&cfg)
	cfg.MaxInFlightBytes = 1 << 20
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'first', 'k')`)
	b.db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, key, headers, idempotency_key, destination) VALUES
	    (repeat('t', 4100), 'x', 'k', NULL, 'long-topic', NULL),
	    ('events.a', 'x', repeat('k', 4001), NULL, 'long-key', NULL),
	    ('events.a', 'x', 'k', NULL, repeat('i', 801), NULL),
	    ('events.a', 'x', 'k', NULL, 'long-destination', repeat('d', 256)),
	    ('events.a', 'x', 'k', (SELECT jsonb_object_agg('h' || i, md5(i::text) || md5((i + 1)::text)) FROM generate_series(1, 400) AS i), 'large-headers', NULL),
	    ('events.a', convert_to(repeat('p', 2100000), 'UTF8'), 'k', NULL, 'large-payload', NULL)`)
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'last', 'k')`)
	relaytest.InsertRows(t, b.db, 100, "events.b")
	relaytest.Start(t, b.db.Pool, cfg)
	relaytest.WaitDrained(t, b.db, 30*time.Second)

	want := map[string]string{
		"long-topic":             "topic of 4100 bytes exceeds the relay's limit on a row's topic of 255 bytes",
		"long-key":               "key of 4001 bytes exceeds the relay's limit on a row's key of 4000 bytes",
		strings.Repeat("i", 801): "idempotency_key of 801 bytes exceeds the relay's limit on a row's idempotency_key of 800 bytes",
		"long-destination":       "destination of 256 bytes exceeds the relay's limit on a row's destination of 255 bytes",
		"large-headers":          "headers of",
		"large-payload":          "payload of 2100000 bytes exceeds RELAY_MAX_IN_FLIGHT_BYTES of 1048576 bytes",
	}
	rows, err := b.db.Pool.Query(context.Background(), "SELECT idempotency_key, reason, error FROM "+b.db.Table("dead_letters"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var key, reason, msg string
		if err := rows.Scan(&key, &reason, &msg); err != nil {
			t.Fatal(err)
		}
		if reason != "permanent" {
			t.Errorf("row %.20s dead-lettered as %s, want permanent", key, reason)
		}
		got[key] = msg
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for key, msg := range want {
		if !strings.Contains(got[key], msg) {
			t.Errorf("row %.20s: dead letter %q, want one saying %q", key, got[key], msg)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d dead letters, want %d", len(got), len(want))
	}
	if n := b.db.Count(t, "archive"); n != 102 {
		t.Errorf("%d rows delivered, want the 102 ordinary ones", n)
	}
	if n := testutil.ToFloat64(cfg.Metrics.ClaimErrors); n != 0 {
		t.Errorf("%v claims failed", n)
	}
}

func TestHostile_ClaimsThatKeepFailingMakeTheRelayNotReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.Lease = 2 * time.Second // claims give up after half a second behind a lock
	r, _ := relaytest.Start(t, b.db.Pool, cfg)
	waitfor.Condition(t, 10*time.Second, "the relay to be ready", func() bool { return r.Ready(context.Background()) == nil })

	// Someone holds the table: every claim fails.
	conn := b.db.Conn(t)
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), "LOCK TABLE "+b.db.Table("messages")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waitfor.Condition(t, 30*time.Second, "/readyz to say claims fail", func() bool {
		err := r.Ready(context.Background())
		return err != nil && strings.Contains(err.Error(), "claims have failed for")
	})
	if err := r.Ready(context.Background()); strings.Contains(err.Error(), "user=") || strings.Contains(err.Error(), b.db.Name+"`") {
		t.Errorf("readiness names the database: %v", err)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitfor.Condition(t, 30*time.Second, "the relay to be ready again", func() bool { return r.Ready(context.Background()) == nil })
}
