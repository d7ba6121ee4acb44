package relay

import (
	"context"
	"fmt"
	"time"
)

// Retention runs this often, deleting this many rows per statement.
const (
	retentionInterval = time.Minute
	retentionChunk    = 5000
)

// gaugeCountCap bounds the rows a gauge query counts, so that refreshing the
// gauges stays cheap on a huge backlog.
const gaugeCountCap = 1_000_000

// maintain refreshes the backlog gauges and enforces retention until ctx
// ends. Failures are logged and counted; the next round tries again.
func (r *Relay) maintain(ctx context.Context) {
	stats := time.NewTicker(r.cfg.StatsInterval)
	defer stats.Stop()
	retention := time.NewTicker(retentionInterval)
	defer retention.Stop()
	r.refreshStats(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-stats.C:
			r.refreshStats(ctx)
		case <-retention.C:
			r.enforceRetention(ctx)
		}
	}
}

// refreshStats sets the backlog, oldest-due-age, backoff, dead-letter, dead
// tuple and lock-wait gauges with two bounded queries.
func (r *Relay) refreshStats(ctx context.Context) {
	if err := r.queryStats(ctx); err != nil && ctx.Err() == nil {
		r.metrics.StatsErrors.Inc()
		r.log.Warn("refresh backlog gauges", "err", err)
	}
}

func (r *Relay) queryStats(ctx context.Context) error {
	rows, err := r.pool.Query(ctx, r.q.backlog, r.cfg.DefaultSink, gaugeCountCap)
	if err != nil {
		return fmt.Errorf("query backlog: %w", err)
	}
	// Every configured sink and unknownSink get a value each time (no
	// Reset, so that a scrape never sees the series missing), and
	// destinations that name no sink share unknownSink: row data must not
	// make series.
	backlog := map[string]float64{unknownSink: 0}
	for name := range r.cfg.Sinks {
		backlog[name] = 0
	}
	for rows.Next() {
		var sink string
		var due int64
		if err := rows.Scan(&sink, &due); err != nil {
			rows.Close()
			return fmt.Errorf("query backlog: %w", err)
		}
		if _, ok := r.cfg.Sinks[sink]; !ok {
			sink = unknownSink
		}
		backlog[sink] += float64(due)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("query backlog: %w", err)
	}
	var inBackoff, dead, deadTuples, lockWaits int64
	var oldest float64
	err = r.pool.QueryRow(ctx, r.q.tableHealth, r.cfg.Schema, gaugeCountCap).
		Scan(&inBackoff, &oldest, &dead, &deadTuples, &lockWaits)
	if err != nil {
		return fmt.Errorf("read table health: %w", err)
	}
	for sink, n := range backlog {
		r.metrics.Backlog.WithLabelValues(sink).Set(n)
	}
	r.metrics.InBackoff.Set(float64(inBackoff))
	r.metrics.OldestDueAge.Set(oldest)
	r.metrics.DeadLetters.Set(float64(dead))
	r.metrics.HotTableDeadTuples.Set(float64(deadTuples))
	r.metrics.LockWaits.Set(float64(lockWaits))
	return nil
}

// enforceRetention deletes archived rows and delivered keys older than their
// retention, a chunk at a time so that no statement runs long.
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
			tag, err := r.pool.Exec(ctx, t.query, cutoff, retentionChunk)
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
