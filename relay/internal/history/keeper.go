package history

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of a Config.
const (
	// DefaultLockWait is how long adding or dropping a partition waits for
	// its lock before the round gives up on the table.
	DefaultLockWait = 100 * time.Millisecond
	// DefaultChunk is how many of the first partition's expired rows one
	// statement deletes.
	DefaultChunk = 5000
	// maxInterval is the longest pause between rounds.
	maxInterval = time.Minute
	// foreverWidth is the width of partitions kept forever.
	foreverWidth = 30 * 24 * time.Hour
)

// DB is what a Keeper needs of the database: a pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var _ DB = (*pgxpool.Pool)(nil)

// Table is a history table and how long its rows are kept.
type Table struct {
	// Name is archive or delivered_keys.
	Name string
	// Keep is the table's retention; zero or less keeps its rows forever.
	Keep time.Duration
	// Width is the span of each partition added; zero: Width(Keep).
	// The relay gives the delivered keys LookupWidth(Keep).
	Width time.Duration
}

// Hooks report what a Keeper does, for metrics. Every field is optional.
type Hooks struct {
	// Dropped learns the partitions a round dropped from a table and the
	// rows they held.
	Dropped func(table string, partitions int, rows int64)
	// Deleted learns the first partition's expired rows a round deleted.
	Deleted func(table string, rows int64)
	// Partitions learns, after each round, how many partitions a table has.
	Partitions func(table string, n int)
}

// Config configures a Keeper.
type Config struct {
	// DB reaches the schema's tables.
	DB DB
	// Statements are the keeper's statements, rendered for the schema.
	Statements Statements
	// Tables are the history tables to keep, with their retention.
	Tables []Table
	// Interval is the pause between rounds; zero: a quarter of the
	// narrowest width, at most a minute.
	Interval time.Duration
	// LockWait bounds each wait for the lock that adding or dropping a
	// partition takes (DefaultLockWait when zero).
	LockWait time.Duration
	// Chunk is how many of the first partition's expired rows one
	// statement deletes (DefaultChunk when zero).
	Chunk int
	// Now is the clock of the rounds; nil: the database's (now()), which
	// also stamps delivered_at, so that a relay whose clock runs ahead
	// never drops a partition early.
	Now func() time.Time
	// Logger receives what rounds drop and their failures. Default: none.
	Logger *slog.Logger
	// Redact returns the text of an error for the logs. Default err.Error().
	Redact func(error) string
	// Hooks report what rounds do.
	Hooks Hooks
}

// Keeper keeps a schema's history tables in partitions (doc.go).
type Keeper struct {
	cfg Config
	// failing records, per table, that the last round failed, so that a
	// recovery is logged once.
	failing map[string]bool
	// busy counts, per table, the rounds in a row that could not have
	// their lock.
	busy map[string]int
}

// busyWarning is how many rounds in a row may find a table busy before
// the keeper warns: three quarters of a width at most, while the
// partitions added ahead still cover a quarter.
const busyWarning = 3

// Width returns the width of the partitions of a table whose rows are
// kept for keep: a quarter of it, so that a row is dropped at most a
// quarter of its retention late and a lookup of a delivered key probes
// about six partitions; at least a second; 30 days when rows are kept
// forever (keep zero or less).
func Width(keep time.Duration) time.Duration {
	if keep <= 0 {
		return foreverWidth
	}
	return max(keep/4, time.Second)
}

// LookupWidth returns the width of the partitions of a table whose rows
// are looked up one by one, the delivered keys (each claimed row with a
// key its producer chose is looked up there): half of keep, so that a
// lookup probes three or four partitions' indexes, not six or seven (each
// costs about a microsecond of the database's time per row); at least a
// second; 30 days when rows are kept forever (keep zero or less). Rows are
// then kept at most half their retention longer.
func LookupWidth(keep time.Duration) time.Duration {
	if keep <= 0 {
		return foreverWidth
	}
	return max(keep/2, time.Second)
}

// New returns a keeper of cfg.Tables.
func New(cfg Config) *Keeper {
	cfg.Tables = slices.Clone(cfg.Tables)
	for i, t := range cfg.Tables {
		if t.Width <= 0 {
			cfg.Tables[i].Width = Width(t.Keep)
		}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = maxInterval
		for _, t := range cfg.Tables {
			cfg.Interval = min(cfg.Interval, t.Width/4)
		}
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
	return &Keeper{cfg: cfg, failing: map[string]bool{}, busy: map[string]int{}}
}

// Run runs a round every Interval until ctx ends. A relay runs one with
// Maintain before it starts claiming, then Run.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.Maintain(ctx)
		}
	}
}

// Maintain runs one round (doc.go) for every table. Failures are logged;
// the next round tries again.
func (k *Keeper) Maintain(ctx context.Context) {
	for _, t := range k.cfg.Tables {
		err := k.maintain(ctx, t)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			k.cfg.Logger.Warn("keep the history's partitions", "table", t.Name, "err", k.cfg.Redact(err))
			k.failing[t.Name] = true
		case k.failing[t.Name]:
			k.cfg.Logger.Info("the history's partitions are kept again", "table", t.Name)
			delete(k.failing, t.Name)
		}
	}
}

// maintain runs a round for table t.
func (k *Keeper) maintain(ctx context.Context, t Table) error {
	var at *time.Time
	if k.cfg.Now != nil {
		now := k.cfg.Now()
		at = &now
	}
	var keep *float64
	if t.Keep > 0 {
		s := t.Keep.Seconds()
		keep = &s
	}
	rows, err := k.cfg.DB.Query(ctx, k.cfg.Statements.Maintain, pgx.StrictNamedArgs{
		"table": t.Name, "at": at, "width_s": t.Width.Seconds(), "keep_s": keep,
		"lock_wait_ms": float64(k.cfg.LockWait) / float64(time.Millisecond),
	})
	if err != nil {
		return fmt.Errorf("add and drop partitions: %w", err)
	}
	type round struct {
		At               time.Time
		Created, Dropped int
		DroppedRows      int64 `db:"dropped_rows"`
		Busy             bool
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[round])
	if err != nil {
		return fmt.Errorf("add and drop partitions: %w", err)
	}
	if r.Dropped > 0 {
		k.cfg.Logger.Info("dropped history partitions past retention", "table", t.Name,
			"partitions", r.Dropped, "rows", r.DroppedRows, "retention", t.Keep)
		if k.cfg.Hooks.Dropped != nil {
			k.cfg.Hooks.Dropped(t.Name, r.Dropped, r.DroppedRows)
		}
	}
	switch {
	case r.Busy:
		k.busy[t.Name]++
		if k.busy[t.Name] == busyWarning {
			k.cfg.Logger.Warn("cannot add or drop the history's partitions: another session holds a lock on the table (pg_locks names it) or another relay keeps them; trying every round, and settles fail once the partitions added ahead run out",
				"table", t.Name, "rounds", k.busy[t.Name])
		}
	case k.busy[t.Name] >= busyWarning:
		k.cfg.Logger.Info("the history's partitions are kept again", "table", t.Name, "busy_rounds", k.busy[t.Name])
		fallthrough
	default:
		delete(k.busy, t.Name)
	}
	parts, err := k.partitions(ctx, t.Name)
	if err != nil {
		return err
	}
	if k.cfg.Hooks.Partitions != nil {
		k.cfg.Hooks.Partitions(t.Name, len(parts))
	}
	if t.Keep <= 0 || len(parts) == 0 || parts[0].Lower.InfinityModifier != pgtype.NegativeInfinity {
		return nil
	}
	before := r.At.Add(-t.Keep)
	if parts[0].Upper.Time.Before(before) {
		before = parts[0].Upper.Time
	}
	return k.deleteExpiredFirst(ctx, t.Name, before)
}

// Partition is one partition of a history table and its bounds: the first
// partition's lower bound is -infinity.
type Partition struct {
	Name         string
	Lower, Upper pgtype.Timestamptz
}

// partitions lists table's partitions, oldest first.
func (k *Keeper) partitions(ctx context.Context, table string) ([]Partition, error) {
	rows, err := k.cfg.DB.Query(ctx, k.cfg.Statements.Partitions, pgx.StrictNamedArgs{"table": table})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Partition, error) {
		var p Partition
		err := row.Scan(&p.Name, &p.Lower, &p.Upper)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return parts, nil
}

// deleteExpiredFirst deletes the first partition's rows delivered before
// before, a chunk at a time, so that no statement runs long.
func (k *Keeper) deleteExpiredFirst(ctx context.Context, table string, before time.Time) error {
	var deleted int64
	defer func() {
		if deleted > 0 && k.cfg.Hooks.Deleted != nil {
			k.cfg.Hooks.Deleted(table, deleted)
		}
	}()
	for ctx.Err() == nil {
		tag, err := k.cfg.DB.Exec(ctx, k.cfg.Statements.DeleteExpiredFirst[table],
			pgx.StrictNamedArgs{"before": before, "chunk": k.cfg.Chunk})
		if err != nil {
			return fmt.Errorf("delete the first partition's expired rows: %w", err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < int64(k.cfg.Chunk) {
			break
		}
	}
	return nil
}
