package horizon_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
)

// hold is how long the tests hold a snapshot open: the age they measure.
const hold = time.Second

// pool returns a pool reaching url, closed at cleanup.
func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// connect opens a connection to url as application name app, closed at
// cleanup.
func connect(t *testing.T, url, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
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

// holdSnapshot has conn hold a REPEATABLE READ snapshot, has other commit
// 10 transactions that each take an id behind it, and returns when the
// snapshot was taken.
func holdSnapshot(t *testing.T, conn, other *pgx.Conn) time.Time {
	t.Helper()
	begun := time.Now()
	exec(t, conn, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	exec(t, conn, "SELECT count(*) FROM pg_catalog.pg_class")
	for range 10 {
		exec(t, other, "SELECT pg_catalog.txid_current()")
	}
	return begun
}

// gauges is what a Reader's hooks learned at its last reading.
type gauges struct {
	mu      sync.Mutex
	seconds map[string]float64
	xids    map[string]float64
	reads   int
	failed  []error
}

// hooks returns hooks that record into g.
func (g *gauges) hooks() horizon.Hooks {
	g.seconds, g.xids = map[string]float64{}, map[string]float64{}
	return horizon.Hooks{
		SnapshotAge: func(holder string, seconds float64) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.seconds[holder] = seconds
		},
		XminAge: func(holder string, xids float64) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.xids[holder] = xids
			if holder == horizon.Holders[len(horizon.Holders)-1] {
				g.reads++
			}
		},
		Failed: func(err error) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.failed = append(g.failed, err)
		},
	}
}

// reader returns a Reader of url's database whose hooks record into g and
// that logs into log.
func reader(t *testing.T, url string, g *gauges, log *bytes.Buffer) *horizon.Reader {
	t.Helper()
	return horizon.New(horizon.Config{
		DB:     pool(t, url),
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Hooks:  g.hooks(),
	})
}

// refresh reads once and returns the session's snapshot and xmin ages.
func refresh(t *testing.T, r *horizon.Reader, g *gauges) (seconds, xids float64) {
	t.Helper()
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return g.seconds[horizon.HolderSession], g.xids[horizon.HolderSession]
}

// A session that holds a REPEATABLE READ snapshot holds the horizon until
// it ends: a reading reports its age in seconds and in transactions, for
// the session holder only, and back near 0 once it commits. The test has
// a database of its own: every session of a database holds its horizon.
func TestReader_SnapshotAgeRisesAndFalls(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	var g gauges
	var log bytes.Buffer
	r := reader(t, url, &g, &log)
	other := connect(t, url, "other")

	seconds, xids := refresh(t, r, &g)
	if seconds >= hold.Seconds() || xids > 100 {
		t.Fatalf("before any snapshot is held a reading says %.1fs and %.0f transactions", seconds, xids)
	}
	if _, ok := g.seconds[horizon.HolderReplication]; ok || len(g.seconds) != 2 || len(g.xids) != 3 {
		t.Errorf("a reading reported seconds %v and transactions %v: want seconds for session and prepared, transactions for all three", g.seconds, g.xids)
	}

	holder := connect(t, url, "holder")
	begun := holdSnapshot(t, holder, other)
	time.Sleep(hold) // the age the test measures
	held := time.Since(begun)
	seconds, xids = refresh(t, r, &g)
	if seconds < held.Seconds()-0.5 || xids < 10 {
		t.Errorf("session: %.2fs and %.0f transactions after a snapshot was held for %s behind 10 transactions", seconds, xids, held)
	}
	for _, h := range []string{horizon.HolderPrepared, horizon.HolderReplication} {
		if g.seconds[h] != 0 || g.xids[h] != 0 {
			t.Errorf("holder %s: %.1fs and %.0f transactions, want 0: only a session holds the horizon", h, g.seconds[h], g.xids[h])
		}
	}

	exec(t, holder, "COMMIT")
	seconds, xids = refresh(t, r, &g)
	if seconds >= hold.Seconds() || xids >= 10 {
		t.Errorf("after the snapshot ended a reading says %.2fs and %.0f transactions, want them back near 0", seconds, xids)
	}
	if log.Len() > 0 {
		t.Errorf("the test database's superuser sees every session, yet the reader warned: %s", log.String())
	}
}

// PostgreSQL shows every session's backend_xmin, but when a transaction
// started only to roles with pg_read_all_stats (and to the session's own
// role): a reader whose role lacks it reads how many transactions the
// horizon is behind, not for how long, and says so once, at warn.
func TestReader_WithoutReadAllStatsWarnsOnce(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	role := dbtest.NewRole(t, "reader")
	var g gauges
	var log bytes.Buffer
	r := reader(t, role.WithUser(url), &g, &log)
	holder := connect(t, url, "holder") // the superuser: another role
	holdSnapshot(t, holder, connect(t, url, "other"))
	time.Sleep(hold)

	seconds, xids := refresh(t, r, &g)
	if seconds >= hold.Seconds() || xids < 10 {
		t.Errorf("without pg_read_all_stats: %.2fs and %.0f transactions; want the snapshot untimed (PostgreSQL hides xact_start) and 10 transactions behind", seconds, xids)
	}
	refresh(t, r, &g)
	want := "the relay's database role cannot see when other roles' transactions started: " +
		"outbox_relay_oldest_snapshot_age_seconds times only its own sessions' (outbox_relay_oldest_xmin_age_transactions sees every one); " +
		"grant pg_read_all_stats to the role for the age of every snapshot that holds back vacuum (docs/security.md)"
	if n := strings.Count(log.String(), "pg_read_all_stats to the role"); n != 1 || !strings.Contains(log.String(), "level=WARN msg=\""+want+"\" metric=outbox_relay_oldest_snapshot_age_seconds needs=pg_read_all_stats") {
		t.Errorf("after two readings without pg_read_all_stats the reader warned %d times, want once with the relay's text:\n%s", n, log.String())
	}
}

// A prepared transaction holds the horizon until it is committed or rolled
// back, whoever is connected: a reading times it from its PREPARE. It needs
// max_prepared_transactions > 0, which PostgreSQL's default (0) is not.
func TestReader_PreparedTransactionHoldsIt(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	var g gauges
	var log bytes.Buffer
	r := reader(t, url, &g, &log)
	other := connect(t, url, "other")
	prepared := func() (seconds, xids float64) {
		t.Helper()
		refresh(t, r, &g)
		return g.seconds[horizon.HolderPrepared], g.xids[horizon.HolderPrepared]
	}
	var maxPrepared int
	if err := other.QueryRow(context.Background(), "SELECT current_setting('max_prepared_transactions')::int").Scan(&maxPrepared); err != nil {
		t.Fatal(err)
	}
	if maxPrepared == 0 {
		// Not a skip: what this server allows is checked, the prepared
		// transactions' part of the statement reading an empty view.
		if s, x := prepared(); s != 0 || x != 0 {
			t.Errorf("no transaction can be prepared on this server, yet holder prepared reads %.1fs and %.0f transactions", s, x)
		}
		t.Log("max_prepared_transactions = 0 on this server: no transaction can be prepared; only the empty view is checked")
		return
	}

	holder := connect(t, url, "holder")
	gid := "horizon-test-" + strings.ReplaceAll(t.Name(), "/", "-")
	exec(t, holder, "BEGIN")
	exec(t, holder, "SELECT pg_catalog.txid_current()")
	begun := time.Now()
	exec(t, holder, "PREPARE TRANSACTION '"+gid+"'")
	done := false
	t.Cleanup(func() {
		if !done {
			_, _ = other.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'")
		}
	})
	holder.Close(context.Background()) // a prepared transaction outlives its session
	for range 10 {
		exec(t, other, "SELECT pg_catalog.txid_current()")
	}
	time.Sleep(hold) // the age the test measures
	held := time.Since(begun)
	if s, x := prepared(); s < held.Seconds()-0.5 || x < 10 {
		t.Errorf("holder prepared: %.2fs and %.0f transactions after a transaction stayed prepared for %s and 10 more committed", s, x, held)
	}
	// The listing names it by its gid.
	o, err := horizon.ReadOldest(context.Background(), pool(t, url), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Holders) == 0 || o.Holders[0].Kind != horizon.HolderPrepared || o.Holders[0].Name != gid || o.Holders[0].PID != nil ||
		o.Holders[0].User == "" || o.Holders[0].AgeSeconds == nil || *o.Holders[0].AgeSeconds < held.Seconds()-0.5 {
		t.Errorf("holders %+v, want the prepared transaction %s first, with its owner and age", o.Holders, gid)
	}
	exec(t, other, "COMMIT PREPARED '"+gid+"'")
	done = true
	if s, x := prepared(); s != 0 || x != 0 {
		t.Errorf("after COMMIT PREPARED holder prepared reads %.2fs and %.0f transactions, want 0", s, x)
	}
}

// failingDB fails every statement with err.
type failingDB struct{ err error }

func (f failingDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, f.err }

func (f failingDB) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	panic("failingDB: SendBatch")
}

// Run reads at once and then every Config.Every until its context ends; a
// reading that fails is reported and logged, and the next one tries again.
func TestReader_RunReadsEveryIntervalAndReportsFailures(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	var g gauges
	var log bytes.Buffer
	r := horizon.New(horizon.Config{DB: pool(t, url), Every: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil)), Hooks: g.hooks()})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		reads := g.reads
		g.mu.Unlock()
		if reads >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Run read %d times in 10s, every 10ms", reads)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-done
	if len(g.failed) > 0 || log.Len() > 0 {
		t.Errorf("Run failed %v, logged %s", g.failed, log.String())
	}

	refused := errors.New("connection refused")
	var fg gauges
	log.Reset()
	r = horizon.New(horizon.Config{DB: failingDB{refused}, Every: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&log, nil)), Hooks: fg.hooks()})
	ctx, stop = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		fg.mu.Lock()
		n := len(fg.failed)
		fg.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not report its failed reading in 10s")
		}
	}
	stop()
	<-done
	if !errors.Is(fg.failed[0], refused) || len(fg.xids) != 0 || !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "connection refused") {
		t.Errorf("a failed reading: reported %v, gauges %v, logged %s", fg.failed, fg.xids, log.String())
	}
}
