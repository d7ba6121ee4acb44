package rotation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of a Config.
const (
	// DefaultEvery is how long a generation stays current.
	DefaultEvery = time.Minute
	// DefaultLockWait is how long emptying or rotating waits for its locks
	// before the round gives up on it: a producer's insert waits behind a
	// rotation no longer than that.
	DefaultLockWait = 50 * time.Millisecond
	// DefaultChunk is how many waiting rows one statement carries.
	DefaultChunk = 5000
	// maxInterval is the longest pause between rounds.
	maxInterval = 10 * time.Second
	// analyzeAfter is how many rows the current generation takes before
	// the rotator analyzes it, once per turn (messages_analyze).
	analyzeAfter = 1000
	// busyWarning is how many rounds in a row may find a step's locks
	// taken before the rotator warns.
	busyWarning = 3
)

// DB is what a Rotator needs of the database: a pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var _ DB = (*pgxpool.Pool)(nil)

// Generation is one slot of the hot table and what it holds.
type Generation struct {
	// Slot is the slot, 1 to 3; its table keeps its oid for ever.
	Slot int
	// Generation counts the turns: the current slot's is the highest.
	Generation int64
	// State is current, draining or spare.
	State string
	// Table is the slot's table now: messages when current, else
	// messages_g<slot>.
	Table string `db:"table_name"`
	// Since is when the slot took its state, and AgeSeconds how long
	// ago, by the database's clock (the relay's may differ).
	Since      time.Time
	AgeSeconds float64 `db:"age_seconds"`
	// Attached is whether messages_all reads the table: an empty spare is
	// taken out of it.
	Attached bool
	// LiveRows and DeadRows are the statistics' estimates of the table's
	// rows and dead row versions.
	LiveRows int64 `db:"live_rows"`
	DeadRows int64 `db:"dead_rows"`
	// TotalBytes is the table's size, indexes and TOAST included.
	TotalBytes int64 `db:"total_bytes"`
}

// Hooks report what a Rotator does, for metrics. Every field is optional.
type Hooks struct {
	// Rotated learns the generation that became current.
	Rotated func(generation int64)
	// Emptied learns that a drained generation was truncated.
	Emptied func(slot int)
	// Carried learns how many waiting rows a round carried forward.
	Carried func(rows int64)
	// Busy learns that a step (carry, empty or rotate) could not have its
	// locks.
	Busy func(step string)
	// Generations learns, after each round, the generations.
	Generations func([]Generation)
}

// Config configures a Rotator.
type Config struct {
	// DB reaches the schema's tables.
	DB DB
	// Statements are the rotator's statements, rendered for the schema.
	Statements Statements
	// Every is how long a generation stays current (DefaultEvery when
	// zero).
	Every time.Duration
	// PinnedEvery is how long a generation stays current, and drains
	// before its waiting rows are carried, while the oldest holder of the
	// horizon is older than the current generation (Statements.Pinned):
	// none of its dead versions can be vacuumed then, and only emptying
	// the generation frees them. Zero: a quarter of Every, at least a
	// second (and at most Every).
	PinnedEvery time.Duration
	// Interval is the pause between rounds; zero: a quarter of the
	// generations' pace (Every, or PinnedEvery while pinned), at least
	// 100 ms and at most 10 seconds.
	Interval time.Duration
	// LockWait bounds each wait for the locks that emptying and rotating
	// take (DefaultLockWait when zero).
	LockWait time.Duration
	// Chunk is how many waiting rows one statement carries (DefaultChunk
	// when zero).
	Chunk int
	// Logger receives rotations and failures. Default: none.
	Logger *slog.Logger
	// Redact returns the text of an error for the logs. Default err.Error().
	Redact func(error) string
	// Hooks report what rounds do.
	Hooks Hooks
}

// Rotator rotates a schema's hot table (doc.go).
type Rotator struct {
	cfg Config
	// failing records that the last round failed, so that a recovery is
	// logged once.
	failing bool
	// busy counts, per step, the rounds in a row that could not have
	// their locks.
	busy map[string]int
	// pinned records that the last round found the horizon older than
	// the current generation, so that the generations turn every
	// PinnedEvery and rounds come sooner.
	pinned bool
}

// New returns a rotator configured by cfg.
func New(cfg Config) *Rotator {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.PinnedEvery <= 0 {
		cfg.PinnedEvery = min(max(cfg.Every/4, time.Second), cfg.Every)
	}
	if cfg.LockWait <= 0 {
		cfg.LockWait = DefaultLockWait
	}
	if cfg.Chunk <= 0 {
		cfg.Chunk = DefaultChunk
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Redact == nil {
		cfg.Redact = func(err error) string { return err.Error() }
	}
	return &Rotator{cfg: cfg, busy: map[string]int{}}
}

// Run runs a round every Interval until ctx ends.
func (r *Rotator) Run(ctx context.Context) {
	t := time.NewTimer(r.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Round(ctx)
			t.Reset(r.interval())
		}
	}
}

// every is how long a generation stays current at the pace of the last
// round: Every, or PinnedEvery while the horizon is older than the
// current generation.
func (r *Rotator) every() time.Duration {
	if r.pinned {
		return r.cfg.PinnedEvery
	}
	return r.cfg.Every
}

// interval is the pause before the next round: Config.Interval, or a
// quarter of every(), at least 100 ms and at most 10 seconds.
func (r *Rotator) interval() time.Duration {
	if r.cfg.Interval > 0 {
		return r.cfg.Interval
	}
	return min(max(r.every()/4, 100*time.Millisecond), maxInterval)
}

// Round carries the oldest draining generation's waiting rows forward,
// empties it if it holds no row, rotates if the current generation is old
// enough, and reports the generations. Failures are logged; the next round
// tries again.
func (r *Rotator) Round(ctx context.Context) {
	err := r.round(ctx)
	if ctx.Err() != nil {
		return
	}
	switch {
	case err != nil:
		r.cfg.Logger.Warn("rotate the hot table", "err", r.cfg.Redact(err))
		r.failing = true
	case r.failing:
		r.cfg.Logger.Info("the hot table rotates again")
		r.failing = false
	}
}

// round runs the steps of a round.
func (r *Rotator) round(ctx context.Context) error {
	// A step that fails does not hold the others up: a horizon that
	// cannot be read leaves the pace as it was, and a carry that fails
	// still lets a drained generation be emptied and the hot table rotate.
	carryErr := errors.Join(r.readPinned(ctx), r.carry(ctx))
	if err := r.empty(ctx); err != nil {
		return errors.Join(carryErr, err)
	}
	if err := r.rotate(ctx); err != nil {
		return errors.Join(carryErr, err)
	}
	if carryErr != nil {
		return carryErr
	}
	if _, err := r.cfg.DB.Exec(ctx, r.cfg.Statements.Analyze, pgx.StrictNamedArgs{"min_rows": analyzeAfter}); err != nil {
		return fmt.Errorf("analyze the current generation: %w", err)
	}
	gens, err := r.Generations(ctx)
	if err != nil {
		return err
	}
	if r.cfg.Hooks.Generations != nil {
		r.cfg.Hooks.Generations(gens)
	}
	return nil
}

// carry moves waiting rows out of the oldest draining generation, a chunk
// at a time, until a chunk comes back short.
func (r *Rotator) carry(ctx context.Context) error {
	var carried int64
	defer func() {
		if carried > 0 && r.cfg.Hooks.Carried != nil {
			r.cfg.Hooks.Carried(carried)
		}
	}()
	type result struct {
		Carried  int64
		Attached bool
		Busy     bool
	}
	for ctx.Err() == nil {
		rows, err := r.cfg.DB.Query(ctx, r.cfg.Statements.Carry, pgx.StrictNamedArgs{
			"chunk": r.cfg.Chunk, "lock_wait_ms": r.lockWaitMS(), "settle_s": r.every().Seconds(),
		})
		var res result
		if err == nil {
			res, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[result])
		}
		if err != nil {
			return fmt.Errorf("carry waiting rows into a younger generation: %w", err)
		}
		r.noteBusy("carry", res.Busy, "cannot carry waiting rows into the spare: another session holds a lock on messages_all (a mode switch; pg_locks names it); trying every round, and the drained generation cannot be emptied meanwhile")
		carried += res.Carried
		if !res.Attached && res.Carried < int64(r.cfg.Chunk) {
			return nil
		}
	}
	return ctx.Err()
}

// empty truncates the oldest draining generation if it holds no row.
func (r *Rotator) empty(ctx context.Context) error {
	rows, err := r.cfg.DB.Query(ctx, r.cfg.Statements.Empty, pgx.StrictNamedArgs{"lock_wait_ms": r.lockWaitMS()})
	if err != nil {
		return fmt.Errorf("empty a drained generation: %w", err)
	}
	type result struct {
		Emptied *int
		Busy    bool
	}
	res, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[result])
	if err != nil {
		return fmt.Errorf("empty a drained generation: %w", err)
	}
	r.noteBusy("empty", res.Busy, "cannot empty a drained generation of the hot table: another session holds a lock on it (a long transaction that read messages_all, or a reader; pg_locks names it); trying every round, and the hot table cannot rotate until it is emptied")
	if res.Emptied != nil && r.cfg.Hooks.Emptied != nil {
		r.cfg.Hooks.Emptied(*res.Emptied)
	}
	return nil
}

// rotate makes the spare the current generation when the current one is
// old enough.
func (r *Rotator) rotate(ctx context.Context) error {
	rows, err := r.cfg.DB.Query(ctx, r.cfg.Statements.Rotate, pgx.StrictNamedArgs{
		"every_s": r.every().Seconds(), "lock_wait_ms": r.lockWaitMS(),
	})
	if err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	type result struct {
		Generation *int64
		Busy       bool
	}
	res, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[result])
	if err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	r.noteBusy("rotate", res.Busy, "cannot rotate the hot table: another session holds a lock on messages (a transaction that inserted and has not ended, or a reader; pg_locks names it); trying every round, and the current generation keeps growing meanwhile")
	if res.Generation != nil {
		r.cfg.Logger.Debug("the hot table rotated", "generation", *res.Generation)
		if r.cfg.Hooks.Rotated != nil {
			r.cfg.Hooks.Rotated(*res.Generation)
		}
	}
	return nil
}

// readPinned reads whether the oldest holder of the horizon is older than
// the current generation (Statements.Pinned), and logs when that changes
// the pace of the generations.
func (r *Rotator) readPinned(ctx context.Context) error {
	if r.cfg.Statements.Pinned == "" || r.cfg.PinnedEvery >= r.cfg.Every {
		return nil
	}
	rows, err := r.cfg.DB.Query(ctx, r.cfg.Statements.Pinned)
	if err != nil {
		return fmt.Errorf("read whether the horizon is older than the current generation: %w", err)
	}
	pinned, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if errors.Is(err, pgx.ErrNoRows) {
		pinned, err = false, nil // no current generation: the old layout, or a migration under way
	}
	if err != nil {
		return fmt.Errorf("read whether the horizon is older than the current generation: %w", err)
	}
	switch {
	case pinned && !r.pinned:
		r.cfg.Logger.Info("a transaction older than the hot table's current generation holds the MVCC horizon: its dead row versions cannot be vacuumed, so the generations turn faster until it ends",
			"every", r.cfg.PinnedEvery, "instead_of", r.cfg.Every, "metric", "outbox_relay_oldest_xmin_age_transactions")
	case !pinned && r.pinned:
		r.cfg.Logger.Info("the MVCC horizon is younger than the hot table's current generation again: the generations turn at their usual pace",
			"every", r.cfg.Every)
	}
	r.pinned = pinned
	return nil
}

// noteBusy counts the rounds in a row whose step found its locks taken,
// warns at the busyWarning-th and logs the recovery after a warning.
func (r *Rotator) noteBusy(step string, busy bool, warning string) {
	switch {
	case busy:
		r.busy[step]++
		if r.cfg.Hooks.Busy != nil {
			r.cfg.Hooks.Busy(step)
		}
		if r.busy[step] == busyWarning {
			r.cfg.Logger.Warn(warning, "step", step, "rounds", r.busy[step], "lock_wait", r.cfg.LockWait)
		}
	case r.busy[step] >= busyWarning:
		r.cfg.Logger.Info("the hot table's locks are free again", "step", step, "busy_rounds", r.busy[step])
		fallthrough
	default:
		delete(r.busy, step)
	}
}

// lockWaitMS is LockWait in milliseconds.
func (r *Rotator) lockWaitMS() float64 {
	return float64(r.cfg.LockWait) / float64(time.Millisecond)
}

// Generations reports the generations, by slot.
func (r *Rotator) Generations(ctx context.Context) ([]Generation, error) {
	rows, err := r.cfg.DB.Query(ctx, r.cfg.Statements.Generations)
	if err != nil {
		return nil, fmt.Errorf("list the generations: %w", err)
	}
	gens, err := pgx.CollectRows(rows, pgx.RowToStructByName[Generation])
	if err != nil {
		return nil, fmt.Errorf("list the generations: %w", err)
	}
	return gens, nil
}
