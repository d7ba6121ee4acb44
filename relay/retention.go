package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Retention runs this often, deleting this many rows per statement.
const (
	retentionInterval = time.Minute
	retentionChunk    = 5000
)

// retentionJanitor deletes what is past its retentionJanitor: archived rows, delivered
// keys, and relays gone for a day (loop).
type retentionJanitor struct {
	cfg                                                   *Config
	pool                                                  *pgxpool.Pool
	log                                                   *slog.Logger
	metrics                                               *Metrics
	deleteExpiredArchive, deleteExpiredKeys, relaysForget string
}

// newRetention returns the retention of a relay with cfg.
func newRetention(cfg *Config, pool *pgxpool.Pool, log *slog.Logger) *retentionJanitor {
	f := func(q string) string { return render(q, cfg.Schema, nil) }
	return &retentionJanitor{cfg: cfg, pool: pool, log: log, metrics: cfg.Metrics,
		deleteExpiredArchive: f(queryArchiveDeleteExpired), deleteExpiredKeys: f(queryDeliveredKeysDeleteExpired),
		relaysForget: f(queryRelaysForget)}
}

// retentionLoop deletes archived rows, delivered keys and relays gone for a
// day past their retention every retentionInterval until ctx ends.
func (rt *retentionJanitor) retentionLoop(ctx context.Context) {
	t := time.NewTicker(retentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rt.enforce(ctx)
			if _, err := rt.pool.Exec(ctx, rt.relaysForget, pgx.StrictNamedArgs{"gone": forgetAfter}); err != nil && ctx.Err() == nil {
				rt.log.Warn("forget relays gone for a day", "err", err)
			}
		}
	}
}

// enforce deletes archived rows and delivered keys older than their
// retention, a chunk at a time so that no statement runs long. Failures are
// logged; the next round tries again.
func (rt *retentionJanitor) enforce(ctx context.Context) {
	for _, t := range []struct {
		table     string
		query     string
		retention time.Duration
	}{
		{"archive", rt.deleteExpiredArchive, rt.cfg.ArchiveRetention},
		{"delivered_keys", rt.deleteExpiredKeys, rt.cfg.DedupRetention},
	} {
		if t.retention < 0 {
			continue
		}
		cutoff := time.Now().Add(-t.retention)
		for ctx.Err() == nil {
			tag, err := rt.pool.Exec(ctx, t.query, pgx.StrictNamedArgs{"cutoff": cutoff, "chunk": retentionChunk})
			if err != nil {
				if ctx.Err() == nil {
					rt.log.Warn("enforce retention", "table", t.table, "err", err)
				}
				break
			}
			rt.metrics.RetentionDeleted.WithLabelValues(t.table).Add(float64(tag.RowsAffected()))
			if tag.RowsAffected() < retentionChunk {
				break
			}
		}
	}
}
