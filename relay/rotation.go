package relay

import (
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
	"github.com/outbox-relay/outbox-relay/relay/internal/rotation"
)

// newRotation returns the rotator of the hot table of a relay with cfg
// (relay/internal/rotation), or nil when cfg.HotRotation is negative
// (off), and reports its rounds in cfg.Metrics.
func newRotation(cfg *Config, pool *pgxpool.Pool, log *slog.Logger) *rotation.Rotator {
	if cfg.HotRotation < 0 {
		return nil
	}
	m := cfg.Metrics
	return rotation.New(rotation.Config{
		DB:         pool,
		Statements: rotation.Render(pgx.Identifier{cfg.Schema}.Sanitize(), horizon.OldestAgeXids),
		Every:      cfg.HotRotation,
		Logger:     log,
		Redact:     redactConnError,
		Hooks: rotation.Hooks{
			Rotated: func(int64) { m.HotRotations.Inc() },
			Emptied: func(int) { m.HotGenerationsEmptied.Inc() },
			Carried: func(n int64) { m.HotRowsCarried.Add(float64(n)) },
			Busy:    func(step string) { m.HotRotationBusy.WithLabelValues(step).Inc() },
			Generations: func(gens []rotation.Generation) {
				for _, state := range []string{"current", "draining", "spare"} {
					var n, live, dead, bytes int
					var age float64
					for _, g := range gens {
						if g.State != state {
							continue
						}
						n++
						live += int(g.LiveRows)
						dead += int(g.DeadRows)
						bytes += int(g.TotalBytes)
						age = max(age, g.AgeSeconds)
					}
					m.HotGenerations.WithLabelValues(state).Set(float64(n))
					m.HotGenerationAge.WithLabelValues(state).Set(age)
					m.HotGenerationRows.WithLabelValues(state, "live").Set(float64(live))
					m.HotGenerationRows.WithLabelValues(state, "dead").Set(float64(dead))
					m.HotGenerationBytes.WithLabelValues(state).Set(float64(bytes))
				}
			},
		},
	})
}
