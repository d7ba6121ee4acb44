package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention runs this often, deleting this many rows per statement.
const (
	retentionInterval = time.Minute
	retentionChunk    = 5000
)

// retentionLoop deletes archived rows, delivered keys and relays gone for a
// day past their retention every retentionInterval until ctx ends.
func (r *Relay) retentionLoop(ctx context.Context) {
	t := time.NewTicker(retentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.enforceRetention(ctx)
			if _, err := r.pool.Exec(ctx, r.q.relaysForget, pgx.StrictNamedArgs{"gone": forgetAfter}); err != nil && ctx.Err() == nil {
				r.log.Warn("forget relays gone for a day", "err", err)
			}
		}
	}
}

// enforceRetention deletes archived rows and delivered keys older than their
// retention, a chunk at a time so that no statement runs long. Failures are
// logged; the next round tries again.
func (r *Relay) enforceRetention(ctx context.Context) {
	for _, t := range []struct {
		table     string
		query     string
		retention time.Duration
	}{
		{"archive", r.q.deleteExpiredArchive, r.cfg.ArchiveRetention},
		{"delivered_keys", r.q.deleteExpiredKeys, r.cfg.DedupRetention},
	} {
		if t.retention < 0 {
			continue
		}
		cutoff := time.Now().Add(-t.retention)
		for ctx.Err() == nil {
			tag, err := r.pool.Exec(ctx, t.query, pgx.StrictNamedArgs{"cutoff": cutoff, "chunk": retentionChunk})
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("enforce retention", "table", t.table, "err", err)
				}
				break
			}
			r.metrics.RetentionDeleted.WithLabelValues(t.table).Add(float64(tag.RowsAffected()))
			if tag.RowsAffected() < retentionChunk {
				break
			}
		}
	}
}
