package relay

import (
	"bytes"
	"context"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// horizonHold is how long the tests hold a snapshot open.
const horizonHold = 2 * time.Second

// horizonRelay is a relay whose pool reaches url, logging into log, for
// calling refreshHorizon.
func horizonRelay(t *testing.T, url string, log *bytes.Buffer) *Relay {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r, err := New(pool, Config{
		Sinks:   map[string]sinks.Sink{"nats": &sinktest.Func{}},
		Metrics: NewMetrics(),
		Logger:  slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// connect opens a connection to url, closed at cleanup.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// burnXids commits n transactions that each take a transaction id, so that
// a held xmin ages in transactions too.
func burnXids(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	for range n {
		exec(t, conn, "SELECT pg_catalog.txid_current()")
	}
}

// readHorizonGauges refreshes r's horizon gauges and returns the snapshot age
// in seconds and the xmin age in transactions of holder.
func readHorizonGauges(t *testing.T, r *Relay, holder string) (seconds, xids float64) {
	t.Helper()
	if err := r.gauges.horizon.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if horizon.TimedHolder(holder) {
		seconds = testutil.ToFloat64(r.cfg.Metrics.OldestSnapshotAge.WithLabelValues(holder))
	}
	return seconds, testutil.ToFloat64(r.cfg.Metrics.OldestXminAge.WithLabelValues(holder))
}

// A REPEATABLE READ session that ran a query holds its snapshot, and with it
// the database's xmin horizon, until it ends: the gauges rise past the time
// it has been held and the transactions since, and fall when it commits.
// The test has a database of its own: every session of a database holds
// its horizon, and other tests' sessions would move what it measures.
func TestHorizon_SnapshotAgeRisesAndFalls(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	var log bytes.Buffer
	r := horizonRelay(t, url, &log)
	other := connect(t, url)

	seconds, xids := readHorizonGauges(t, r, "session")
	if seconds >= horizonHold.Seconds() || xids > 100 {
		t.Fatalf("before any snapshot is held the gauges read %.1fs and %.0f transactions", seconds, xids)
	}

	holder := connect(t, url)
	begun := time.Now()
	exec(t, holder, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	exec(t, holder, "SELECT count(*) FROM pg_catalog.pg_class")
	burnXids(t, other, 10)
	time.Sleep(horizonHold) // the time held is what the test measures
	held := time.Since(begun)
	seconds, xids = readHorizonGauges(t, r, "session")
	if seconds < held.Seconds()-0.5 {
		t.Errorf("oldest_snapshot_age_seconds{holder=session} = %.2f after holding a snapshot for %s", seconds, held)
	}
	if xids < 10 {
		t.Errorf("oldest_xmin_age_transactions{holder=session} = %.0f after 10 transactions behind a held snapshot", xids)
	}
	for _, h := range []string{"prepared", "replication"} {
		if s, x := readHorizonGauges(t, r, h); s != 0 || x != 0 {
			t.Errorf("holder %s reads %.1fs and %.0f transactions, want 0: only a session holds the horizon", h, s, x)
		}
	}

	exec(t, holder, "COMMIT")
	seconds, xids = readHorizonGauges(t, r, "session")
	if seconds >= horizonHold.Seconds() || xids >= 10 {
		t.Errorf("after the snapshot ended the gauges read %.2fs and %.0f transactions, want them back near 0", seconds, xids)
	}
	if log.Len() > 0 {
		t.Errorf("the test database's superuser sees every session, yet the relay warned: %s", log.String())
	}
}

// A prepared transaction holds the horizon until it is committed or rolled
// back, whoever is connected: the gauges time it from its PREPARE. It needs
// max_prepared_transactions > 0, which PostgreSQL's default (0) is not.
func TestHorizon_PreparedTransactionHoldsIt(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	var log bytes.Buffer
	r := horizonRelay(t, url, &log)
	other := connect(t, url)
	var maxPrepared int
	if err := other.QueryRow(context.Background(), "SELECT current_setting('max_prepared_transactions')::int").Scan(&maxPrepared); err != nil {
		t.Fatal(err)
	}
	if maxPrepared == 0 {
		// The rest of the statement (sessions, slots) is tested above; the
		// prepared transactions' part reads an empty view here.
		if s, x := readHorizonGauges(t, r, "prepared"); s != 0 || x != 0 {
			t.Errorf("no transaction can be prepared on this server, yet holder prepared reads %.1fs and %.0f transactions", s, x)
		}
		// Not a skip: what this server allows is checked. A prepared
		// transaction holding the horizon was checked on a server with
		// max_prepared_transactions > 0 when this test was written.
		t.Log("max_prepared_transactions = 0 on this server: no transaction can be prepared; only the empty view is checked")
		return
	}

	holder := connect(t, url)
	gid := "horizon-test-" + strings.ReplaceAll(t.Name(), "/", "-")
	exec(t, holder, "BEGIN")
	exec(t, holder, "SELECT pg_catalog.txid_current()")
	begun := time.Now()
	exec(t, holder, "PREPARE TRANSACTION '"+gid+"'")
	prepared := true
	t.Cleanup(func() {
		if prepared {
			_, _ = other.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'")
		}
	})
	holder.Close(context.Background()) // a prepared transaction outlives its session
	burnXids(t, other, 10)
	time.Sleep(horizonHold)
	held := time.Since(begun)
	seconds, xids := readHorizonGauges(t, r, "prepared")
	if seconds < held.Seconds()-0.5 || xids < 10 {
		t.Errorf("oldest_snapshot_age_seconds{holder=prepared} = %.2f, oldest_xmin_age_transactions = %.0f, "+
			"after a transaction stayed prepared for %s and 10 more committed", seconds, xids, held)
	}
	if s, _ := readHorizonGauges(t, r, "session"); s >= horizonHold.Seconds() {
		t.Errorf("no session holds a snapshot, yet holder session reads %.2fs", s)
	}

	exec(t, other, "COMMIT PREPARED '"+gid+"'")
	prepared = false
	if s, x := readHorizonGauges(t, r, "prepared"); s != 0 || x != 0 {
		t.Errorf("after COMMIT PREPARED holder prepared reads %.2fs and %.0f transactions, want 0", s, x)
	}
}

// PostgreSQL shows every session's backend_xmin, but when a transaction
// started only to roles with pg_read_all_stats (and to the session's own
// role): a relay whose role lacks it sees how many transactions the horizon
// is behind, not for how long, and says so once, at warn. Granted
// pg_read_all_stats, it times every session.
func TestHorizon_WithoutReadAllStatsWarnsOnce(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	role := dbtest.NewRole(t, "relay")
	var log bytes.Buffer
	r := horizonRelay(t, role.WithUser(url), &log)
	other := connect(t, url) // the superuser: another role

	holder := connect(t, url)
	begun := time.Now()
	exec(t, holder, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	exec(t, holder, "SELECT count(*) FROM pg_catalog.pg_class")
	burnXids(t, other, 10)
	time.Sleep(horizonHold)

	seconds, xids := readHorizonGauges(t, r, "session")
	if seconds >= horizonHold.Seconds() {
		t.Errorf("without pg_read_all_stats the relay timed another role's snapshot (%.2fs): PostgreSQL hides xact_start", seconds)
	}
	if xids < 10 {
		t.Errorf("oldest_xmin_age_transactions{holder=session} = %.0f: backend_xmin is shown to every role", xids)
	}
	readHorizonGauges(t, r, "session")
	warned := strings.Count(log.String(), "pg_read_all_stats to the role")
	if warned != 1 || !strings.Contains(log.String(), "level=WARN") {
		t.Errorf("after two refreshes without pg_read_all_stats the relay warned %d times, want once:\n%s", warned, log.String())
	}

	exec(t, other, "GRANT pg_read_all_stats TO "+pgx.Identifier{role.Name}.Sanitize())
	log.Reset()
	r = horizonRelay(t, role.WithUser(url), &log)
	held := time.Since(begun)
	seconds, _ = readHorizonGauges(t, r, "session")
	if seconds < held.Seconds()-0.5 {
		t.Errorf("granted pg_read_all_stats, the relay reads %.2fs for a snapshot held %s", seconds, held)
	}
	if log.Len() > 0 {
		t.Errorf("granted pg_read_all_stats, the relay still warned: %s", log.String())
	}
}
