package sharedcount

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config says where the readings are kept and how often the relays count.
type Config struct {
	// Pool is the relay's connection pool.
	Pool *pgxpool.Pool
	// Table is the readings' table, quoted: "schema".gauge_readings.
	Table string
	// Relay is this relay's id, stored with the readings it counts.
	Relay string
	// Interval is the time between rounds, and about how often the relays
	// of the schema count between them.
	Interval time.Duration
	// Hooks are what the rounds do with the readings.
	Hooks Hooks
}

// Hooks are what a round does with the readings. Count is required; the
// others are optional.
type Hooks struct {
	// Count reads what every relay of the schema would read: the round
	// holds the turn.
	Count func(ctx context.Context) ([]byte, error)
	// Use takes each round's readings: counted by this relay (own, age
	// 0), or stored by the relay that counted them, age ago; nil when
	// none are stored yet and the relay counting the first has not
	// finished within an interval.
	Use func(ctx context.Context, readings []byte, age time.Duration, own bool) error
	// Failed reports a round that failed; the next round tries again.
	Failed func(err error)
}

func (c Config) render(sql string) string { return strings.ReplaceAll(sql, "{table}", c.Table) }

// holdFor is how many intervals a turn lasts: a count of a huge backlog
// may take most of an interval on a busy server, and a turn that ran out
// while its relay still counted would let another relay count the same rows.
const holdFor = 3

// Counter runs a relay's rounds.
type Counter struct{ cfg Config }

// New returns a Counter of cfg.
func New(cfg Config) *Counter { return &Counter{cfg: cfg} }

// Run runs a round every Interval until ctx ends, the first at once.
func (c *Counter) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if err := c.Round(ctx); err != nil && ctx.Err() == nil && c.cfg.Hooks.Failed != nil {
			c.cfg.Hooks.Failed(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round takes the turn and counts when the stored readings are stale and
// nobody else counts, and otherwise uses the stored readings (doc.go).
func (c *Counter) Round(ctx context.Context) error {
	cfg, h := c.cfg, c.cfg.Hooks
	args := pgx.StrictNamedArgs{
		"relay": cfg.Relay,
		"fresh": cfg.Interval * 9 / 10,
		"hold":  holdFor * cfg.Interval,
	}
	waitUntil := time.Now().Add(cfg.Interval)
	for {
		var began *time.Time
		var readings []byte
		var age float64
		if err := cfg.Pool.QueryRow(ctx, cfg.render(queryRound), args).Scan(&began, &readings, &age); err != nil {
			// The turns cannot be kept (the table unreadable): the
			// relay counts for itself rather than show nothing.
			err = fmt.Errorf("take the turn to count: %w", err)
			if ctx.Err() != nil {
				return err
			}
			readings, cerr := h.Count(ctx)
			if cerr == nil {
				cerr = use(ctx, h, readings, 0, true)
			}
			return errors.Join(err, cerr)
		}
		if began != nil {
			return count(ctx, cfg, h, *began)
		}
		if readings != nil || !time.Now().Before(waitUntil) {
			return use(ctx, h, readings, time.Duration(age*float64(time.Second)), false)
		}
		// No readings yet: another relay counts the schema's first (or
		// gave the turn back, and the next try takes it).
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(max(cfg.Interval/20, 10*time.Millisecond), time.Second)):
		}
	}
}

// count counts, as the holder of the turn that began at began, stores the
// readings and uses them; a failed count gives the turn back.
func count(ctx context.Context, cfg Config, h Hooks, began time.Time) error {
	readings, err := h.Count(ctx)
	if err != nil {
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if _, rerr := cfg.Pool.Exec(releaseCtx, cfg.render(queryRelease), pgx.StrictNamedArgs{"relay": cfg.Relay}); rerr != nil {
			err = errors.Join(err, fmt.Errorf("give back the turn to count: %w", rerr))
		}
		return err
	}
	if _, err := cfg.Pool.Exec(ctx, cfg.render(queryStore), pgx.StrictNamedArgs{"relay": cfg.Relay, "began": began, "readings": readings}); err != nil {
		return fmt.Errorf("store the gauges' readings: %w", err)
	}
	return use(ctx, h, readings, 0, true)
}

// use passes readings to h.Use, when set.
func use(ctx context.Context, h Hooks, readings []byte, age time.Duration, own bool) error {
	if h.Use == nil {
		return nil
	}
	return h.Use(ctx, readings, age, own)
}
