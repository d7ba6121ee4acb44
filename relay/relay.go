package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// settleGrace is how long settling may go on after the drain timeout at
// shutdown, so that the outcomes of the last deliveries are written down.
const settleGrace = 5 * time.Second

// settlers is the number of concurrent settle round trips.
const settlers = 2

// Relay moves rows from the outbox table to their sinks. Create it with New
// and run it with Run.
type Relay struct {
	cfg     Config
	pool    *pgxpool.Pool
	q       queries
	log     *slog.Logger
	metrics *Metrics

	// mode is what the delivery mode decides (modes.go), and settleSQL its
	// settle statements.
	mode      mode
	settleSQL settleStatements

	inflight   *inFlight
	draining   atomic.Bool
	deliveries sync.WaitGroup
	settleCh   chan []outcome
	// claimHealth records, per claim loop, since when its claims fail.
	claimHealth []claimHealth
	// pacer spaces the loops' claims of a steady stream (pacing.go).
	pacer *claimPacer
	// settleHealth records since when settles fail, and the rows whose
	// settle is refused on their own.
	settleHealth *settleHealth
	// readiness is Ready's last answer, and until when it serves.
	readiness struct {
		mu    sync.Mutex
		until time.Time
		err   error
	}
	// watches follow each sink's availability and deliveries (watch.go).
	watches map[string]*sinkWatch
	// notified wakes every claim loop when a producer inserted
	// (Config.Notify; notify.go), through notify, the database's listener
	// (nil without Notify); ownListener is set when the relay runs it.
	notified *broadcast
	notify   *Listener
	// found wakes the follower claim loops when a loop found rows.
	found       *broadcast
	ownListener bool
	// idlePause is the claim loops' current pause after an empty claim
	// (claimLoop), which paces the floor's refreshes while idle.
	idlePause atomic.Int64
	// failures gathers each sink's failed deliveries for the log
	// (failureLogs.loop).
	failures *failureLogs
	// tracer makes the send spans; nil when tracing is off
	// (Config.TracerProvider), and sinkTraces what they carry by sink.
	tracer     trace.Tracer
	sinkTraces map[string]*sinkTrace
	// horizonWarned is set once the relay has said that its role cannot
	// time other roles' snapshots (refreshHorizon).
	horizonWarned atomic.Bool
	// floor is where claims start on the due index (floor.go), and
	// claimSampler says which claims are measured (claimsample.go).
	floor        *claimFloor
	claimSampler claimSampler
	// live follows the claim, settle and heartbeat loops and the bucket
	// owner (Live; live.go).
	live *liveness.Monitor
}

// New returns a relay over pool, which must reach a database migrated by
// package migrations. It validates cfg but does not touch the database.
func New(pool *pgxpool.Pool, cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	cfg.Metrics.exportSeries(slices.Collect(maps.Keys(cfg.Sinks)))
	log := cfg.Logger.With("relay_id", cfg.ID, "schema", cfg.Schema)
	r := &Relay{
		cfg:      cfg,
		pool:     pool,
		q:        renderQueries(cfg.Schema),
		log:      log,
		metrics:  cfg.Metrics,
		inflight: newInFlight(cfg.MaxInFlight, cfg.MaxInFlightBytes),
		settleCh: make(chan []outcome, 64),
		notified: newBroadcast(),
		found:    newBroadcast(),
		failures: newFailureLogs(log, cfg.Sinks),
		floor:    newFloor(),
	}
	r.idlePause.Store(int64(cfg.PollInterval))
	r.live = newLiveness(r, livenessThreshold(cfg.Lease))
	if cfg.Notify {
		r.notify = cfg.Listener
		if r.notify == nil {
			r.notify, r.ownListener = NewListener(pool, log), true
		}
	}
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(tracerName, trace.WithInstrumentationVersion(cfg.Version))
		r.sinkTraces = newSinkTraces(cfg)
	}
	r.mode = newMode(r)
	r.q.floor, r.q.floorRescan = renderFloor(cfg.Schema, r.mode.oldestClaimable())
	r.settleSQL = r.mode.settleStatements()
	r.claimHealth = make([]claimHealth, len(r.mode.claimers()))
	r.pacer = newClaimPacer(r.mode.claimers())
	r.settleHealth = &settleHealth{refusedFor: 2 * cfg.Lease}
	r.watches = make(map[string]*sinkWatch, len(cfg.Sinks))
	for name := range cfg.Sinks {
		r.watches[name] = &sinkWatch{stallAfter: cfg.StallAfter, lastSuccess: time.Now()}
	}
	return r, nil
}

// Run registers the relay on the schema, then claims, delivers and settles
// rows until ctx is cancelled, then drains: it stops claiming, lets in-flight
// deliveries finish for up to DrainTimeout, releases what they did not
// finish, settles every outcome and returns nil. It returns a
// *ModeConflictError without starting when relays of another mode are alive
// on the schema, and a *SinkConflictError when relays with another default
// sink are, and a *ModeChangedError after draining when the schema's
// mode changed under it. Database and sink failures are logged, counted and
// retried.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.registerWithRetry(ctx); err != nil {
		if ctx.Err() != nil && !refusedToStart(err) {
			return nil // stopped before it started: nothing claimed
		}
		return err
	}
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// Deliveries and settling outlive ctx: they end on their own schedule
	// once draining starts.
	deliverCtx, cancelDeliveries := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDeliveries()
	settleCtx, cancelSettle := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSettle()

	var settling sync.WaitGroup
	for i := range settlers {
		live := r.live.Start(fmt.Sprintf("settle loop %d", i+1))
		settling.Go(func() {
			defer live.Done()
			r.settleLoop(settleCtx, r.settleCh, live)
		})
	}
	// The mode's own work goes on until everything is settled.
	modeCtx, stopMode := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMode()
	var moding sync.WaitGroup
	moding.Go(func() { r.mode.run(modeCtx) })
	var background sync.WaitGroup
	background.Go(func() { r.statsLoop(runCtx) })
	background.Go(func() { r.floorLoop(runCtx) })
	background.Go(func() { r.rescanLoop(runCtx) })
	background.Go(func() { r.retentionLoop(runCtx) })
	background.Go(func() { r.failures.loop(runCtx) })
	background.Go(func() { r.live.Run(runCtx) })
	if r.notify != nil {
		notified, unsubscribe := r.notify.subscribe(r.cfg.Schema)
		defer unsubscribe()
		r.notified = notified
		if r.ownListener {
			background.Go(func() { r.notify.Run(runCtx) })
		}
	}
	heartbeat := r.live.Start("heartbeat loop")
	background.Go(func() {
		defer heartbeat.Done()
		if err := r.heartbeatLoop(runCtx, heartbeat); err != nil {
			r.log.Error("stopping", "err", err)
			stop(err)
		}
	})

	r.log.Info("relay started", "mode", r.cfg.Mode, "sinks", slices.Sorted(maps.Keys(r.cfg.Sinks)),
		"default_sink", r.cfg.DefaultSink, "batch_size", r.cfg.BatchSize, "lease", r.cfg.Lease)
	checkAutovacuum(runCtx, r.pool, r.q.autovacuum, r.cfg.Schema, r.log)
	var claiming sync.WaitGroup
	for i, c := range r.mode.claimers() {
		live := r.live.Start(fmt.Sprintf("claim loop %d (%s)", i+1, c.what))
		claiming.Go(func() {
			defer live.Done()
			r.claimLoop(runCtx, deliverCtx, c, &r.claimHealth[i], live)
		})
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
	stopMode()
	moding.Wait()
	stop(nil)
	background.Wait()
	r.failures.logAll()
	r.log.Info("relay stopped")
	if err := context.Cause(runCtx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Ready reports whether the relay can do its work: it is not draining, the
// database answers, claims and settles have not been failing for
// claimsFailingFor, no row's settle was refused lately (settleHealth), and
// every sink is available and delivering (sinkWatch.ready: not stalled,
// connected but every attempt failing for stallAfter, nor back from an
// outage without a delivery since). Its error names no database user
// or name.
func (r *Relay) Ready(ctx context.Context) error {
	if r.draining.Load() {
		return errDraining
	}
	// One check at a time, and its answer serves for readyCacheFor: a
	// readiness endpoint polled by many clients pings the database once.
	r.readiness.mu.Lock()
	defer r.readiness.mu.Unlock()
	if now := time.Now(); now.Before(r.readiness.until) {
		return r.readiness.err
	}
	err := r.ready(ctx)
	r.readiness.err, r.readiness.until = err, time.Now().Add(readyCacheFor)
	return err
}

// ready checks what Ready reports.
func (r *Relay) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := r.pool.Ping(ctx); err != nil {
		return fmt.Errorf("database: %s", redactConnError(err))
	}
	now := time.Now()
	for i := range r.claimHealth {
		if err := r.claimHealth[i].check(now); err != nil {
			return err
		}
	}
	if err := r.settleHealth.check(now); err != nil {
		return err
	}
	for name, s := range r.cfg.Sinks {
		var available error
		if a, ok := s.(sinks.Availability); ok {
			available = a.Available()
		}
		if err := r.watches[name].ready(now, available); err != nil {
			return fmt.Errorf("sink %s: %w", name, err)
		}
	}
	return nil
}

// registerWithRetry registers the relay (register), retrying while the
// database fails and ctx lasts; a refusal to start beside the live relays
// (refusedToStart) is returned at once.
func (r *Relay) registerWithRetry(ctx context.Context) error {
	wait := 250 * time.Millisecond
	for {
		err := r.register(ctx)
		if err == nil || refusedToStart(err) || ctx.Err() != nil {
			return err
		}
		r.log.Warn("could not register on the schema; retrying", "err", err, "retry_in", wait)
		sleep(ctx, wait)
		wait = min(2*wait, 5*time.Second)
	}
}
