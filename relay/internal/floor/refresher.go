package floor

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what a Refresher needs of the database: a pgxpool.Pool, which
// runs a batch on one connection and releases it when the results close.
type DB interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

var _ DB = (*pgxpool.Pool)(nil)

// Hooks report what a Refresher finds, for metrics. Every field is
// optional.
type Hooks struct {
	// Lag learns, after each refresh, how far the floor lies below the
	// refresh's start (0 while it is any time): the relay's
	// outbox_relay_claim_floor_lag_seconds.
	Lag func(time.Duration)
}

// Config configures a Refresher.
type Config struct {
	// DB reaches the schema's tables.
	DB DB
	// Statements are the floor's statements, rendered for the schema and
	// the relay's claim strategy (Render).
	Statements Statements
	// ClaimPlan is the relay's planner settings for its claims, rendered:
	// each refresh and rescan runs it first, in the same transaction, so
	// that the lookups of the oldest rows walk their indexes in order
	// (empty: none).
	ClaimPlan string
	// Lease bounds each refresh and each rescan: one stuck on a lock or a
	// dead connection gives up after it (the relay's row lease). Required.
	Lease time.Duration
	// IdlePause returns the claims' current pause after an empty claim,
	// which paces the refreshes while the relay is idle. Default: none
	// (refreshes while idle come every second).
	IdlePause func() time.Duration
	// Logger receives the failures of refreshes and rescans, and their
	// recoveries. Default: none.
	Logger *slog.Logger
	// Redact returns the text of an error for the logs (the relay's drops
	// the database user and name). Default err.Error().
	Redact func(error) string
	// Hooks report what the refreshes find.
	Hooks Hooks
}

// Refresher keeps a relay's claim floor moving: it runs the refreshes and
// the rescans (Run) and holds the State that the relay's claims consult.
type Refresher struct {
	*State
	cfg Config
}

// New returns a refresher whose floor is not known yet (claims start at
// the oldest row until its first refresh). It panics when cfg.Lease is not
// positive: the lease is the relay's own validated setting.
func New(cfg Config) *Refresher {
	if cfg.Lease <= 0 {
		panic(fmt.Sprintf("floor: lease %s is not positive", cfg.Lease))
	}
	if cfg.IdlePause == nil {
		cfg.IdlePause = func() time.Duration { return 0 }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Redact == nil {
		cfg.Redact = func(err error) string { return err.Error() }
	}
	if cfg.Hooks.Lag == nil {
		cfg.Hooks.Lag = func(time.Duration) {}
	}
	return &Refresher{State: NewState(), cfg: cfg}
}

// Run refreshes the floors and rescans them, each in a loop of its own,
// until ctx ends, and returns when both loops have.
func (r *Refresher) Run(ctx context.Context) {
	var loops sync.WaitGroup
	loops.Go(func() { r.refreshLoop(ctx) })
	loops.Go(func() { r.rescanLoop(ctx) })
	loops.Wait()
}

// refreshLoop refreshes the floors until ctx ends. A failed refresh leaves
// the floors where they were (claims go on from there) and is logged once,
// then at growing intervals while refreshes fail (reminder).
func (r *Refresher) refreshLoop(ctx context.Context) {
	t := time.NewTicker(refreshEvery)
	defer t.Stop()
	var failing reminder
	for {
		// A refresh stuck on a lock or a dead connection gives up after a
		// lease, as claims give up after a quarter of one.
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Lease)
		err := r.Refresh(rctx)
		cancel()
		now := time.Now()
		switch {
		case err == nil:
			if !failing.since.IsZero() {
				r.cfg.Logger.Info("claim floor refreshes again", "failed_for", failing.end(now).Round(time.Second))
			}
		case ctx.Err() != nil:
			return
		case failing.begin(now), failing.due(now):
			r.cfg.Logger.Warn("refresh claim floor: claims go on from the last floor", "err", r.cfg.Redact(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh refreshes the floors when a refresh is due (Run calls it every
// refreshEvery; a test may call it itself), and reports how far the floor
// lies behind the refresh's start (Hooks.Lag).
func (r *Refresher) Refresh(ctx context.Context) error {
	refresh, from, fromKnown := r.due(time.Now(), r.cfg.IdlePause())
	if !refresh {
		return nil
	}
	start := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	if fromKnown {
		start = pgtype.Timestamptz{Time: from.at, Valid: true}
	}
	var rd refreshRead
	var snap, mark string
	var last *int64
	var sequential *bool
	var oldest pgtype.Timestamptz
	// The lookups of the oldest rows at or above the last floors walk
	// their indexes in order (Config.ClaimPlan). Planned for statistics
	// taken while the table was nearly empty, each read every entry above
	// the floor with a bitmap scan before sorting them (under a pinned
	// horizon, every dead one): in ordered mode through messages_key_idx,
	// whose predicate the lookup implies, 85,000 buffers and 1.6 s per
	// refresh, every 100 ms; 5 ms walked in order.
	args := pgx.StrictNamedArgs{"start": start, "start_id": from.id}
	began := time.Now()
	err := r.inPipeline(ctx, "BEGIN", r.cfg.Statements.Refresh, args, &rd.start, &snap, &last, &mark, &sequential, &oldest, &rd.oldestID)
	if err != nil {
		return fmt.Errorf("refresh claim floor: %w", err)
	}
	rd.took = time.Since(began)
	rd.next = math.MinInt64
	if last != nil && sequential != nil && *sequential && *last < math.MaxInt64 {
		rd.next = *last + 1
	}
	if rd.snapshot, err = parseSnapshot(snap); err != nil {
		return fmt.Errorf("refresh claim floor: %w", err)
	}
	if rd.mark, err = strconv.ParseUint(mark, 10, 64); err != nil {
		return fmt.Errorf("refresh claim floor: mark %q: %w", mark, err)
	}
	if oldest.Valid && oldest.InfinityModifier == pgtype.Finite {
		rd.oldest = &oldest.Time
	}
	floor := r.advance(time.Now(), from, fromKnown, rd)
	lag := rd.start.Sub(floor)
	if floor.IsZero() {
		lag = 0
	}
	r.cfg.Hooks.Lag(lag)
	return nil
}

// rescanLoop runs the floor's rescans until ctx ends. A failed rescan is
// logged (then reminded of, as the refreshes' failures are) and tried
// again when the next is due.
func (r *Refresher) rescanLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var failing reminder
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !r.rescanDue(time.Now()) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Lease)
		err := r.rescan(rctx)
		cancel()
		now := time.Now()
		switch {
		case err == nil:
			if !failing.since.IsZero() {
				r.cfg.Logger.Info("claim floor rescans again", "failed_for", failing.end(now).Round(time.Second))
			}
		case ctx.Err() != nil:
			return
		case failing.begin(now), failing.due(now):
			r.cfg.Logger.Warn("rescan claim floor: rows written without the outbox's triggers wait until a rescan succeeds", "err", r.cfg.Redact(err))
		}
	}
}

// rescan runs one rescan (queryFloorRescan) with the claim plan, in a
// read-only transaction, and records it: a failed one too, with the time
// it took, so that one that runs out of time (a lease) under a pin is not
// tried again every minute, each try holding a snapshot for that long.
// rescanDue must have marked it under way.
func (r *Refresher) rescan(ctx context.Context) error {
	began := time.Now()
	var oldest pgtype.Timestamptz
	var oldestID *int64
	args := pgx.StrictNamedArgs{
		"start":    pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true},
		"start_id": int64(math.MinInt64),
	}
	err := r.inPipeline(ctx, "BEGIN READ ONLY", r.cfg.Statements.Rescan, args, &oldest, &oldestID)
	if err != nil {
		r.rescanDone(time.Now(), time.Since(began), nil, nil)
		return fmt.Errorf("rescan claim floor: %w", err)
	}
	var at *time.Time
	if oldest.Valid && oldest.InfinityModifier == pgtype.Finite {
		at = &oldest.Time
	}
	r.rescanDone(time.Now(), time.Since(began), at, oldestID)
	return nil
}

// inPipeline runs sql with args in one transaction on one connection, in
// one round trip, as the relay runs its claims: begin (BEGIN, or BEGIN
// with an access mode), the claim plan, sql and COMMIT go in one
// pipeline, and sql's one row is scanned into dest. The COMMIT's result is
// read last, so nothing the statement did is committed unless every one
// ran. A connection left in a failed transaction is closed by the pool
// when released.
func (r *Refresher) inPipeline(ctx context.Context, begin, sql string, args pgx.StrictNamedArgs, dest ...any) (err error) {
	b := &pgx.Batch{}
	b.Queue(begin)
	if r.cfg.ClaimPlan != "" {
		b.Queue(r.cfg.ClaimPlan)
	}
	b.Queue(sql, args)
	b.Queue("COMMIT")
	br := r.cfg.DB.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return err
	}
	if r.cfg.ClaimPlan != "" {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := br.QueryRow().Scan(dest...); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
