package relay

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// settleGrace is how long settling may go on after the drain timeout at
// shutdown, so that the outcomes of the last deliveries are written down.
const settleGrace = 5 * time.Second

// settlers is the number of concurrent settle round trips.
const settlers = 2

// claimers is the number of concurrent claim loops: while one waits for its
// claim statement the other can run, which doubles the claim rate on a busy
// database.
const claimers = 2

// Relay moves rows from the outbox table to their sinks. Create it with New
// and run it with Run.
type Relay struct {
	cfg     Config
	pool    *pgxpool.Pool
	q       queries
	log     *slog.Logger
	metrics *Metrics

	inflight   *inFlight
	draining   atomic.Bool
	deliveries sync.WaitGroup
	settleCh   chan []outcome
}

// availability is implemented by sinks that know when they cannot deliver at
// all (disconnected, paused by the destination). Their rows are left in the
// table meanwhile, without spending attempts.
type availability interface {
	Available() error
}

// New returns a relay over pool, which must reach a database migrated by
// package migrations. It validates cfg but does not touch the database.
func New(pool *pgxpool.Pool, cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	// Export every series from the start, so that rates and alerts work
	// before the first event.
	for name := range cfg.Sinks {
		for _, o := range []string{outcomeDelivered, outcomeRetried, outcomeDeadLettered, outcomeDeduplicated, outcomeReleased} {
			cfg.Metrics.Messages.WithLabelValues(name, o)
		}
		cfg.Metrics.InFlight.WithLabelValues(name)
		cfg.Metrics.Backlog.WithLabelValues(name)
	}
	cfg.Metrics.Backlog.WithLabelValues(unknownSink)
	for _, table := range []string{"archive", "delivered_keys"} {
		cfg.Metrics.RetentionDeleted.WithLabelValues(table)
	}
	return &Relay{
		cfg:      cfg,
		pool:     pool,
		q:        renderQueries(cfg.Schema, cfg.Ordered),
		log:      cfg.Logger.With("relay_id", cfg.ID),
		metrics:  cfg.Metrics,
		inflight: newInFlight(cfg.MaxInFlight),
		settleCh: make(chan []outcome, 64),
	}, nil
}

// Run claims, delivers and settles rows until ctx is cancelled, then drains:
// it stops claiming, lets in-flight deliveries finish for up to DrainTimeout,
// releases what they did not finish, settles every outcome and returns nil.
// Database and sink failures are logged, counted and retried; Run only
// returns early on a programming error.
func (r *Relay) Run(ctx context.Context) error {
	// Deliveries and settling outlive ctx: they end on their own schedule
	// once draining starts.
	deliverCtx, cancelDeliveries := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDeliveries()
	settleCtx, cancelSettle := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSettle()

	var settling sync.WaitGroup
	for range settlers {
		settling.Go(func() { r.settleLoop(settleCtx, r.settleCh) })
	}
	var background sync.WaitGroup
	background.Go(func() { r.maintain(ctx) })

	r.log.Info("relay started", "schema", r.cfg.Schema, "sinks", slices.Sorted(maps.Keys(r.cfg.Sinks)),
		"default_sink", r.cfg.DefaultSink, "batch_size", r.cfg.BatchSize, "lease", r.cfg.Lease)
	var claiming sync.WaitGroup
	for range claimers {
		claiming.Go(func() { r.claimLoop(ctx, deliverCtx) })
	}
	claiming.Wait()
	r.draining.Store(true)

	inFlight := r.inflight.total()
	r.log.Info("draining: claiming stopped, waiting for in-flight deliveries",
		"num_in_flight", inFlight, "drain_timeout", r.cfg.DrainTimeout)
	cutoff := time.AfterFunc(r.cfg.DrainTimeout, cancelDeliveries)
	hardStop := time.AfterFunc(r.cfg.DrainTimeout+settleGrace, cancelSettle)
	defer hardStop.Stop()
	r.deliveries.Wait()
	cutoff.Stop()
	close(r.settleCh)
	settling.Wait()
	background.Wait()
	r.log.Info("relay stopped")
	return nil
}

// claimLoop claims batches and starts their deliveries until ctx ends. It
// claims again at once while batches come back full and capacity remains,
// waits a tenth of PollInterval after a claim that found some rows, and
// PollInterval after an empty one.
func (r *Relay) claimLoop(ctx context.Context, deliverCtx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		exclude, open := r.closedSinks()
		if !open {
			// Every sink is unavailable or at capacity: wait for a
			// settle to free capacity, or poll availability.
			waitCtx, cancel := context.WithTimeout(ctx, r.cfg.PollInterval)
			_ = r.inflight.waitFreed(waitCtx)
			cancel()
			continue
		}
		start := time.Now()
		// The claim is not cut short by shutdown: rows it leased are
		// delivered or released by the drain, not left leased until the
		// lease expires. A claim stuck behind a lock gives up after a
		// quarter of the lease.
		claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/4)
		batch, err := r.claim(claimCtx, r.cfg.BatchSize, exclude)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			r.metrics.ClaimErrors.Inc()
			wait := min(r.cfg.PollInterval<<min(failures, 10), 5*time.Second)
			r.log.Warn("claim failed; retrying", "err", err, "retry_in", wait, "consecutive_failures", failures)
			sleep(ctx, wait)
			continue
		}
		if failures > 0 {
			r.log.Info("claiming again after failures", "consecutive_failures", failures)
			failures = 0
		}
		if len(batch) > 0 {
			r.dispatch(deliverCtx, batch, start.Add(DeliveryBudget(r.cfg.Lease)))
		}
		switch {
		case len(batch) == r.cfg.BatchSize:
			// A full batch: more are waiting, claim again at once.
		case len(batch) > 0:
			// Rows are arriving: look again soon, so that a steady
			// stream is not delayed by a whole poll interval.
			sleep(ctx, jittered(r.cfg.PollInterval/10))
		default:
			sleep(ctx, jittered(r.cfg.PollInterval))
		}
	}
}

// closedSinks returns the sinks whose rows must not be claimed now (at
// capacity or unavailable) and whether any configured sink is open.
func (r *Relay) closedSinks() (closed []string, anyOpen bool) {
	for name, s := range r.cfg.Sinks {
		available := true
		if a, ok := s.(availability); ok && a.Available() != nil {
			available = false
		}
		r.metrics.SinkAvailable.WithLabelValues(name).Set(boolGauge(available))
		if !available || r.inflight.full(name) {
			closed = append(closed, name)
			continue
		}
		anyOpen = true
	}
	if closed == nil {
		closed = []string{}
	}
	return closed, anyOpen
}

// dispatch starts one delivery per sink in batch.
func (r *Relay) dispatch(ctx context.Context, batch []claimed, deadline time.Time) {
	bySink := map[string][]claimed{}
	for _, c := range batch {
		bySink[c.sink] = append(bySink[c.sink], c)
	}
	for name, rows := range bySink {
		r.inflight.add(name, len(rows))
		r.metrics.InFlight.WithLabelValues(name).Add(float64(len(rows)))
		r.deliveries.Add(1)
		go r.deliver(ctx, name, rows, deadline)
	}
}

// jittered spreads d by ±20%, so that idle replicas do not poll in
// lockstep.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
