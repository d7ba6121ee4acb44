package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay/internal/floor"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
)

// gaugeCountCap bounds the rows a gauge query counts, so that refreshing the
// gauges stays cheap on a huge backlog.
const gaugeCountCap = 1_000_000

// gaugeRefresher refresh the backlog, table-health and horizon gaugeRefresher (loop).
type gaugeRefresher struct {
	cfg         *Config
	pool        *pgxpool.Pool
	log         *slog.Logger
	metrics     *Metrics
	mode        deliveryMode
	floor       *floor.State
	tableHealth string
	horizon     *horizon.Reader
}

// refreshLoop refreshes the backlog, table-health and horizon gauges every
// StatsInterval until ctx ends. Failures are logged and counted; the next
// round tries again.
func (g *gaugeRefresher) refreshLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.StatsInterval)
	defer t.Stop()
	for {
		if err := g.refreshGauges(ctx); err != nil && ctx.Err() == nil {
			g.metrics.StatsErrors.Inc()
			g.log.Warn("refresh backlog gauges", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshGauges sets the backlog, oldest-due-age, backoff, dead-letter, dead
// tuple and lock-wait gauges with bounded queries, the mode's own
// (mode.countDue), and the age of the oldest snapshot (horizon.Reader).
func (g *gaugeRefresher) refreshGauges(ctx context.Context) error {
	// Every configured sink and unknownSink get a value each time (no
	// Reset, so that a scrape never sees the series missing), and
	// destinations that name no sink share unknownSink: row data must not
	// make series.
	backlog := map[string]float64{unknownSink: 0}
	for name := range g.cfg.Sinks {
		backlog[name] = 0
	}
	var oldestDue *time.Time
	add := func(sink string, due int64, oldest *time.Time) {
		if _, ok := g.cfg.Sinks[sink]; !ok {
			sink = unknownSink
		}
		backlog[sink] += float64(due)
		if oldest != nil && (oldestDue == nil || oldest.Before(*oldestDue)) {
			oldestDue = oldest
		}
	}
	oldestKnown, err := g.mode.countDue(ctx, add)
	if err != nil {
		return err
	}
	var inBackoff, dead, deadTuples, lockWaits int64
	var oldest float64
	var dbNow time.Time
	err = g.pool.QueryRow(ctx, g.tableHealth, planPerExecution, pgx.StrictNamedArgs{"schema_name": g.cfg.Schema, "cap": gaugeCountCap, "floor": g.floor.Current()}).
		Scan(&inBackoff, &oldest, &dead, &deadTuples, &lockWaits, &dbNow)
	if err != nil {
		return fmt.Errorf("read table health: %w", err)
	}
	if oldestKnown {
		// The table's oldest due row may be waiting on its key. Its age
		// is by the database's clock, as available_at is: the relay's
		// may differ.
		oldest = 0
		if oldestDue != nil {
			oldest = max(dbNow.Sub(*oldestDue).Seconds(), 0)
		}
	}
	for sink, n := range backlog {
		g.metrics.Backlog.WithLabelValues(sink).Set(n)
	}
	g.metrics.InBackoff.Set(float64(inBackoff))
	g.metrics.OldestDueAge.Set(oldest)
	g.metrics.DeadLetters.Set(float64(dead))
	g.metrics.HotTableDeadTuples.Set(float64(deadTuples))
	g.metrics.LockWaits.Set(float64(lockWaits))
	return g.horizon.Refresh(ctx)
}
