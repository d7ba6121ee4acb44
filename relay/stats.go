package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// gaugeCountCap bounds the rows a gauge query counts, so that refreshing the
// gauges stays cheap on a huge backlog.
const gaugeCountCap = 1_000_000

// statsLoop refreshes the backlog, table-health and horizon gauges every
// StatsInterval until ctx ends. Failures are logged and counted; the next
// round tries again.
func (r *Relay) statsLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.StatsInterval)
	defer t.Stop()
	for {
		if err := r.refreshStats(ctx); err != nil && ctx.Err() == nil {
			r.metrics.StatsErrors.Inc()
			r.log.Warn("refresh backlog gauges", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshStats sets the backlog, oldest-due-age, backoff, dead-letter, dead
// tuple and lock-wait gauges with bounded queries, the mode's own
// (mode.countDue), and the age of the oldest snapshot (refreshHorizon).
func (r *Relay) refreshStats(ctx context.Context) error {
	// Every configured sink and unknownSink get a value each time (no
	// Reset, so that a scrape never sees the series missing), and
	// destinations that name no sink share unknownSink: row data must not
	// make series.
	backlog := map[string]float64{unknownSink: 0}
	for name := range r.cfg.Sinks {
		backlog[name] = 0
	}
	var oldestDue *time.Time
	add := func(sink string, due int64, oldest *time.Time) {
		if _, ok := r.cfg.Sinks[sink]; !ok {
			sink = unknownSink
		}
		backlog[sink] += float64(due)
		if oldest != nil && (oldestDue == nil || oldest.Before(*oldestDue)) {
			oldestDue = oldest
		}
	}
	oldestKnown, err := r.mode.countDue(ctx, add)
	if err != nil {
		return err
	}
	var inBackoff, dead, deadTuples, lockWaits int64
	var oldest float64
	err = r.pool.QueryRow(ctx, r.q.tableHealth, planPerExecution, pgx.StrictNamedArgs{"schema_name": r.cfg.Schema, "cap": gaugeCountCap, "floor": r.floor.current()}).
		Scan(&inBackoff, &oldest, &dead, &deadTuples, &lockWaits)
	if err != nil {
		return fmt.Errorf("read table health: %w", err)
	}
	if oldestKnown {
		// The table's oldest due row may be waiting on its key.
		oldest = 0
		if oldestDue != nil {
			oldest = max(time.Since(*oldestDue).Seconds(), 0)
		}
	}
	for sink, n := range backlog {
		r.metrics.Backlog.WithLabelValues(sink).Set(n)
	}
	r.metrics.InBackoff.Set(float64(inBackoff))
	r.metrics.OldestDueAge.Set(oldest)
	r.metrics.DeadLetters.Set(float64(dead))
	r.metrics.HotTableDeadTuples.Set(float64(deadTuples))
	r.metrics.LockWaits.Set(float64(lockWaits))
	return r.refreshHorizon(ctx)
}

// countDueRows counts the due rows per sink (queryMessagesBacklog) with
// add, for the modes where every due row may be claimed.
func (r *Relay) countDueRows(ctx context.Context, add func(sink string, due int64, oldest *time.Time)) error {
	rows, err := r.pool.Query(ctx, r.q.backlog, planPerExecution, pgx.StrictNamedArgs{"default_sink": r.cfg.DefaultSink, "cap": gaugeCountCap, "floor": r.floor.current()})
	if err != nil {
		return fmt.Errorf("query backlog: %w", err)
	}
	var sink string
	var due int64
	_, err = pgx.ForEachRow(rows, []any{&sink, &due}, func() error {
		add(sink, due, nil)
		return nil
	})
	if err != nil {
		return fmt.Errorf("query backlog: %w", err)
	}
	return nil
}
