package horizon

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The kinds of holder: the holder label values of the gauges.
const (
	// HolderSession is a session of the database holding a snapshot or a
	// transaction id.
	HolderSession = "session"
	// HolderPrepared is a prepared transaction.
	HolderPrepared = "prepared"
	// HolderReplication is a replication slot's xmin or a walsender's (a
	// standby's hot_standby_feedback).
	HolderReplication = "replication"
)

// Holders are the holder label values of the gauges, in the order a
// reading reports them.
var Holders = []string{HolderSession, HolderPrepared, HolderReplication}

// TimedHolder reports whether the holder's transactions have a start time:
// a replication slot or a standby's feedback has an xmin and no start.
func TimedHolder(holder string) bool { return holder != HolderReplication }

// EveryDefault is Config.Every's default: the relay's StatsIntervalDefault.
const EveryDefault = 10 * time.Second

// DB is what the readings need of the database; *pgxpool.Pool, *pgx.Conn
// and pgx.Tx satisfy it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = pgx.Tx(nil)
)

// Hooks report the readings of a Reader, for the gauges. Every field is
// optional.
type Hooks struct {
	// SnapshotAge learns, at each reading, for each holder that has a
	// start time (TimedHolder), how many seconds ago the transaction of
	// its oldest started (of the oldest among those whose start PostgreSQL
	// shows; 0 when none): outbox_relay_oldest_snapshot_age_seconds.
	SnapshotAge func(holder string, seconds float64)
	// XminAge learns, at each reading, for each holder, the age in
	// transactions of its oldest xmin or xid (0 when none):
	// outbox_relay_oldest_xmin_age_transactions.
	XminAge func(holder string, xids float64)
	// Failed learns each reading of Run that failed, which Run also logs
	// at warn (Refresh returns its error instead).
	Failed func(err error)
}

// Config configures a Reader.
type Config struct {
	// DB reaches the database whose horizon is read. Required.
	DB DB
	// Every is how often Run reads. Default EveryDefault.
	Every time.Duration
	// Logger receives the warning that the role cannot see when other
	// roles' transactions started, and Run's failures. Default
	// slog.Default().
	Logger *slog.Logger
	// Hooks report the readings.
	Hooks Hooks
}

// Reader reads the age of the oldest holders of the xmin horizon, for the
// gauges. It is safe for concurrent use.
type Reader struct {
	cfg Config
	// warned is set once the Reader has said that its role cannot see
	// when other roles' transactions started.
	warned atomic.Bool
}

// New returns a Reader. It panics when cfg.DB is nil or cfg.Every is
// negative: both are the engine's own settings, never a user's as they
// are.
func New(cfg Config) *Reader {
	if cfg.DB == nil {
		panic("horizon: Config.DB is nil")
	}
	if cfg.Every < 0 {
		panic(fmt.Sprintf("horizon: Config.Every %s is negative", cfg.Every))
	}
	cfg.Every = cmp.Or(cfg.Every, EveryDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	h := &cfg.Hooks
	if h.SnapshotAge == nil {
		h.SnapshotAge = func(string, float64) {}
	}
	if h.XminAge == nil {
		h.XminAge = func(string, float64) {}
	}
	if h.Failed == nil {
		h.Failed = func(error) {}
	}
	return &Reader{cfg: cfg}
}

// age is a row of queryHorizonAge.
type age struct {
	Holder  string
	Seconds float64
	Xids    int64
	SeesAll bool
}

// Refresh reads the age of the oldest holder of each kind (Holders) once,
// with queryHorizonAge, and reports it through the hooks: in seconds for
// the holders that have a start time, in transactions for every one,
// negative ages as 0. The first time it finds that the role cannot see the
// start of other roles' sessions (no pg_read_all_stats), it says so once,
// at warn. When the reading fails it reports nothing.
func (r *Reader) Refresh(ctx context.Context) error {
	rows, err := r.cfg.DB.Query(ctx, queryHorizonAge)
	if err != nil {
		return fmt.Errorf("read the xmin horizon: %w", err)
	}
	ages, err := pgx.CollectRows(rows, pgx.RowToStructByPos[age])
	if err != nil {
		return fmt.Errorf("read the xmin horizon: %w", err)
	}
	seesAll := true
	for _, a := range ages {
		if TimedHolder(a.Holder) {
			r.cfg.Hooks.SnapshotAge(a.Holder, max(a.Seconds, 0))
		}
		r.cfg.Hooks.XminAge(a.Holder, float64(max(a.Xids, 0)))
		seesAll = seesAll && a.SeesAll
	}
	if !seesAll && r.warned.CompareAndSwap(false, true) {
		r.cfg.Logger.Warn("the relay's database role cannot see when other roles' transactions started: "+
			"outbox_relay_oldest_snapshot_age_seconds times only its own sessions' (outbox_relay_oldest_xmin_age_transactions sees every one); "+
			"grant pg_read_all_stats to the role for the age of every snapshot that holds back vacuum (docs/security.md)",
			"metric", "outbox_relay_oldest_snapshot_age_seconds", "needs", "pg_read_all_stats")
	}
	return nil
}

// Run reads the horizon (Refresh) at once and then every Config.Every
// until ctx ends. A reading that fails is reported (Hooks.Failed), logged
// at warn, and tried again at the next.
func (r *Reader) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Hooks.Failed(err)
			r.cfg.Logger.Warn("refresh the xmin horizon gauges", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
