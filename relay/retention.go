package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay/internal/history"
)

// forgetInterval is how often the relay forgets relays gone for a day.
const forgetInterval = time.Minute

// retentionJanitor removes what is past its retention: the archive's and
// the delivered keys' partitions (relay/internal/history keeps them; the
// janitor wires it) and relays gone for a day.
type retentionJanitor struct {
	pool         *pgxpool.Pool
	log          *slog.Logger
	history      *history.Keeper
	relaysForget string
}

// newRetention returns the retention of a relay with cfg: the archive
// kept for cfg.ArchiveRetention, the delivered keys for cfg.DedupRetention
// (less than zero: forever).
func newRetention(cfg *Config, pool *pgxpool.Pool, log *slog.Logger) *retentionJanitor {
	m := cfg.Metrics
	keeper := history.New(history.Config{
		DB:         pool,
		Statements: history.Render(pgx.Identifier{cfg.Schema}.Sanitize()),
		Tables: []history.Table{
			{Name: "archive", Keep: cfg.ArchiveRetention},
			{Name: "delivered_keys", Keep: cfg.DedupRetention, Width: history.LookupWidth(cfg.DedupRetention)},
		},
		Logger: log,
		Redact: redactConnError,
		Hooks: history.Hooks{
			Dropped: func(table string, _ int, rows int64) { m.RetentionDeleted.WithLabelValues(table).Add(float64(rows)) },
			Deleted: func(table string, rows int64) { m.RetentionDeleted.WithLabelValues(table).Add(float64(rows)) },
			Partitions: func(table string, n int) {
				m.HistoryPartitions.WithLabelValues(table).Set(float64(n))
			},
		},
	})
	return &retentionJanitor{pool: pool, log: log, history: keeper,
		relaysForget: render(queryRelaysForget, cfg.Schema, nil)}
}

// retentionLoop forgets relays gone for a day every forgetInterval until
// ctx ends. (The history's keeper runs beside it: Relay.Run.)
func (rt *retentionJanitor) retentionLoop(ctx context.Context) {
	t := time.NewTicker(forgetInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := rt.pool.Exec(ctx, rt.relaysForget, pgx.StrictNamedArgs{"gone": forgetAfter}); err != nil && ctx.Err() == nil {
				rt.log.Warn("forget relays gone for a day", "err", err)
			}
		}
	}
}
