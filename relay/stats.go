package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay/internal/floor"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
	"github.com/outbox-relay/outbox-relay/relay/internal/sharedcount"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// gaugeCountCap bounds the rows a gauge query counts, so that refreshing the
// gauges stays cheap on a huge backlog.
const gaugeCountCap = 1_000_000

// gaugeRefresher refreshes the backlog, table-health and horizon gauges
// (refreshLoop). The counts are the same for every relay of the schema, so
// the relays take turns counting them (relay/internal/sharedcount); the
// horizon is read by each.
type gaugeRefresher struct {
	cfg         *Config
	pool        *pgxpool.Pool
	log         *slog.Logger
	metrics     *Metrics
	mode        deliveryMode
	floor       *floor.State
	tableHealth string
	// readingsTable is the schema's gauge_readings, quoted.
	readingsTable string
	horizon       *horizon.Reader
}

// gaugeReadings are what one refresh of the gauges counts in the database:
// the same for every relay of the schema, so that one relay counts them
// for all and stores them, as JSON, for the others to read.
type gaugeReadings struct {
	// CountedAs names the counting relay's mode, sinks and default sink
	// (countedAs): a relay configured otherwise counts for itself.
	CountedAs string `json:"counted_as"`
	// Due is the rows due per sink, by the counting relay's sinks
	// (unknownSink: rows whose destination names none of them).
	Due map[string]int64 `json:"due"`
	// OldestDueAge is the age of the oldest due row, in seconds, when
	// counted (0 when none).
	OldestDueAge float64 `json:"oldest_due_age"`
	InBackoff    int64   `json:"in_backoff"`
	DeadLetters  int64   `json:"dead_letters"`
	DeadTuples   int64   `json:"dead_tuples"`
	LockWaits    int64   `json:"lock_waits"`
	// BlockedKeys and WaitingOnKey are ordered mode's counts.
	BlockedKeys  *int64 `json:"blocked_keys,omitempty"`
	WaitingOnKey *int64 `json:"waiting_on_key,omitempty"`

	// OldestKnown says that the oldest due times passed to addDue are the
	// ones to report (deliveryMode.countDue), and oldestDue is the oldest
	// of them: set while counting, not stored.
	OldestKnown bool       `json:"-"`
	oldestDue   *time.Time `json:"-"`
	sinks       map[string]sinks.Sink
}

// addDue adds due rows of sink, the oldest due at oldest (nil: unknown).
// Destinations that name no sink share unknownSink: row data must not make
// keys.
func (r *gaugeReadings) addDue(sink string, due int64, oldest *time.Time) {
	if _, ok := r.sinks[sink]; !ok {
		sink = unknownSink
	}
	r.Due[sink] += due
	if oldest != nil && (r.oldestDue == nil || oldest.Before(*r.oldestDue)) {
		r.oldestDue = oldest
	}
}

// refreshLoop refreshes the gauges every StatsInterval until ctx ends, the
// first time at once: it counts, or reads another relay's counts
// (sharedcount.Run), and reads the horizon (horizonLoop). Failures are logged and
// counted; the next round tries again.
func (g *gaugeRefresher) refreshLoop(ctx context.Context) {
	// The horizon is this relay's own reading, on a loop of its own: a
	// count of a huge backlog must not hold up the pinned-horizon gauge.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { g.horizonLoop(ctx) })
	sharedcount.New(sharedcount.Config{Pool: g.pool, Table: g.readingsTable, Relay: g.cfg.ID, Interval: g.cfg.StatsInterval,
		Hooks: sharedcount.Hooks{
			Count: g.count,
			Use:   g.use,
			Failed: func(err error) {
				g.metrics.StatsErrors.Inc()
				g.log.Warn("refresh backlog gauges", "err", err)
			},
		}}).Run(ctx)
}

// count reads the backlog, oldest-due-age, backoff, dead-letter, dead
// tuple and lock-wait counts with bounded queries, the mode's own
// (mode.countDue), as JSON.
func (g *gaugeRefresher) count(ctx context.Context) ([]byte, error) {
	r, err := g.countReadings(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// countReadings is count, before JSON.
func (g *gaugeRefresher) countReadings(ctx context.Context) (*gaugeReadings, error) {
	r := &gaugeReadings{CountedAs: g.countedAs(), Due: map[string]int64{}, sinks: g.cfg.Sinks}
	if err := g.mode.countDue(ctx, r); err != nil {
		return nil, err
	}
	var dbNow time.Time
	err := g.pool.QueryRow(ctx, g.tableHealth, planPerExecution, pgx.StrictNamedArgs{"schema_name": g.cfg.Schema, "cap": gaugeCountCap, "floor": g.floor.Current()}).
		Scan(&r.InBackoff, &r.OldestDueAge, &r.DeadLetters, &r.DeadTuples, &r.LockWaits, &dbNow)
	if err != nil {
		return nil, fmt.Errorf("read table health: %w", err)
	}
	if r.OldestKnown {
		// The table's oldest due row may be waiting on its key. Its age
		// is by the database's clock, as available_at is: the relay's
		// may differ.
		r.OldestDueAge = 0
		if r.oldestDue != nil {
			r.OldestDueAge = max(dbNow.Sub(*r.oldestDue).Seconds(), 0)
		}
	}
	return r, nil
}

// countedAs names what the readings depend on, for
// gaugeReadings.CountedAs: the mode (ordered mode counts the due rows
// without those waiting on their key, and counts blocked keys), the sinks
// and the default sink (the counts are by sink, of rows without a
// destination counted as the default sink's).
func (g *gaugeRefresher) countedAs() string {
	names := slices.Sorted(maps.Keys(g.cfg.Sinks))
	return string(g.cfg.Mode) + ";" + strings.Join(names, ",") + ";" + g.cfg.DefaultSink
}

// horizonLoop reads the horizon every StatsInterval until ctx ends, the
// first time at once.
func (g *gaugeRefresher) horizonLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.StatsInterval)
	defer t.Stop()
	for {
		if err := g.horizon.Refresh(ctx); err != nil && ctx.Err() == nil {
			g.metrics.StatsErrors.Inc()
			g.log.Warn("refresh horizon gauges", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// use sets the gauges from readings counted age ago (by this relay when
// own; nil: none yet, the gauges keep their values).
// Readings of a relay configured otherwise (a sink being rolled out, the
// schema's mode just switched) count rows by sinks this relay does not have
// or as its mode does not: it counts for itself.
func (g *gaugeRefresher) use(ctx context.Context, readings []byte, age time.Duration, own bool) error {
	if readings != nil {
		r := &gaugeReadings{}
		if err := json.Unmarshal(readings, r); err != nil {
			return fmt.Errorf("read the gauges' readings: %w", err)
		}
		if r.CountedAs != g.countedAs() {
			var err error
			if r, err = g.countReadings(ctx); err != nil {
				return err
			}
			age, own = 0, true
		}
		g.set(r)
		g.metrics.StatsAge.Set(age.Seconds())
		if own {
			g.metrics.StatsCounted.Inc()
		}
	}
	return nil
}

// set sets the gauges from r, as they were counted (stats_age_seconds
// says how long ago).
func (g *gaugeRefresher) set(r *gaugeReadings) {
	// Every configured sink and unknownSink get a value each time (no
	// Reset, so that a scrape never sees the series missing). The
	// readings are by this relay's sinks (use), so a name none of ours is
	// not expected; it would be unknownSink's.
	backlog := map[string]float64{unknownSink: 0}
	for name := range g.cfg.Sinks {
		backlog[name] = 0
	}
	for sink, n := range r.Due {
		if _, ok := g.cfg.Sinks[sink]; !ok {
			sink = unknownSink
		}
		backlog[sink] += float64(n)
	}
	for sink, n := range backlog {
		g.metrics.Backlog.WithLabelValues(sink).Set(n)
	}
	g.metrics.InBackoff.Set(float64(r.InBackoff))
	g.metrics.OldestDueAge.Set(r.OldestDueAge)
	g.metrics.DeadLetters.Set(float64(r.DeadLetters))
	g.metrics.HotTableDeadTuples.Set(float64(r.DeadTuples))
	g.metrics.LockWaits.Set(float64(r.LockWaits))
	if r.BlockedKeys != nil {
		g.metrics.BlockedKeys.Set(float64(*r.BlockedKeys))
	}
	if r.WaitingOnKey != nil {
		g.metrics.WaitingOnKey.Set(float64(*r.WaitingOnKey))
	}
}
