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

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/floor"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
	"github.com/outbox-relay/outbox-relay/relay/internal/keychain"
	"github.com/outbox-relay/outbox-relay/relay/internal/listener"
	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
	"github.com/outbox-relay/outbox-relay/relay/internal/rotation"
)

// settleGrace is how long settling may go on after the drain timeout at
// shutdown, so that the outcomes of the last deliveries are written down.
const settleGrace = 5 * time.Second

// settlers is the number of concurrent settle round trips.
const settlers = 2

// Relay moves rows from the outbox table to their sinks. Create it with New
// and run it with Run. It only wires: each concern is a value of its own
// (the claim loops, the dispatcher and its deliveries, the settlers, the
// registry, the gauges, retention, the claim floor), and the mode receives
// the engine (engine.go), not the Relay.
type Relay struct {
	cfg  Config
	pool *pgxpool.Pool
	log  *slog.Logger

	mode       deliveryMode
	engine     *engine
	claims     *claimLoops
	dispatcher *dispatcher
	settler    *settler
	registry   *registry
	gauges     *gaugeRefresher
	retention  *retentionJanitor
	rotation   *rotation.Rotator // nil: the hot table does not rotate
	floor      *floor.Refresher
	failures   *failureLogs
	watches    *sinkWatches
	// claimHealth records, per claim loop, since when its claims fail;
	// settleHealth since when settles fail, and the rows whose settle is
	// refused on their own.
	claimHealth  []claimHealth
	settleHealth *settleHealth
	draining     atomic.Bool
	// readiness is Ready's last answer, and until when it serves.
	readiness struct {
		mu    sync.Mutex
		until time.Time
		err   error
	}
	// listener is the database's listener (Config.Notify; notify.go), nil
	// without Notify; ownListener is set when the relay runs it.
	listener    *Listener
	ownListener bool
	// live follows the claim, settle and heartbeat loops and the bucket
	// owner (Live).
	live *liveness.Monitor
	// autovacuum is queryAutovacuum, rendered.
	autovacuum string
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
	r := &Relay{cfg: cfg, pool: pool, log: log}
	c, metrics := &r.cfg, cfg.Metrics
	r.live = newLiveness(log, livenessThreshold(cfg.Lease))
	if cfg.Notify {
		r.listener = cfg.Listener
		if r.listener == nil {
			r.listener, r.ownListener = NewListener(pool, log), true
		}
	}
	r.registry = newRegistry(c, pool, log)
	r.engine = &engine{cfg: c, pool: pool, log: log, metrics: metrics,
		claims: newClaimRunner(cfg, pool, log), live: r.live, chains: keychain.New(keychain.Config{}),
		heartbeat: func(ctx context.Context, db queryRower) error {
			_, err := r.registry.recordHeartbeat(ctx, db)
			return err
		},
		backlog: render(queryMessagesBacklog, cfg.Schema, nil),
	}
	r.mode = newMode(r.engine)
	r.floor = floor.New(floor.Config{
		DB: pool, Statements: floor.Render(outbox.QuoteSchema(cfg.Schema), r.mode.oldestClaimable()),
		ClaimPlan: queryClaimPlanPerExecution, Lease: cfg.Lease, Logger: log, Redact: redactConnError,
		IdlePause: func() time.Duration { return time.Duration(r.claims.idlePause.Load()) },
		Hooks: floor.Hooks{Lag: func(d time.Duration) {
			metrics.ClaimFloorLag.Set(d.Seconds())
			r.registry.setFloorLag(d)
		}},
	})
	r.engine.floor, r.engine.claims.floor = r.floor.State, r.floor.State
	claimers := r.mode.claimers()
	inflight := newInFlight(cfg.MaxInFlight, cfg.MaxInFlightBytes)
	r.failures = newFailureLogs(log, cfg.Sinks)
	r.watches = newSinkWatches(c, log)
	r.claimHealth = make([]claimHealth, len(claimers))
	r.settleHealth = &settleHealth{refusedFor: 2 * cfg.Lease}
	settle := make(chan []rowOutcome, 64)
	r.dispatcher = &dispatcher{cfg: c, mode: r.mode, inflight: inflight, metrics: metrics, failures: r.failures, chains: r.engine.chains,
		observers: newSinkObservers(c, log, r.watches, r.failures, settle), settle: settle}
	r.claims = &claimLoops{cfg: c, log: log, metrics: metrics, loops: len(claimers), inflight: inflight,
		watches: r.watches, pacer: newClaimPacer(claimers), dispatcher: r.dispatcher, floor: r.floor.State,
		notified: listener.NewBroadcast(), found: listener.NewBroadcast(), listener: r.listener}
	r.claims.idlePause.Store(int64(cfg.PollInterval))
	r.settler = &settler{cfg: c, pool: pool, log: log, metrics: metrics, mode: r.mode,
		sql: r.mode.settleStatements(), health: r.settleHealth, inflight: inflight, chains: r.engine.chains}
	r.gauges = &gaugeRefresher{cfg: c, pool: pool, log: log, metrics: metrics, mode: r.mode, floor: r.floor.State,
		tableHealth: render(queryTableHealth, cfg.Schema, nil), readingsTable: render("{schema}.gauge_readings", cfg.Schema, nil),
		horizon: horizon.New(horizon.Config{DB: pool, Logger: log, Hooks: horizon.Hooks{
			SnapshotAge: func(h string, s float64) { metrics.OldestSnapshotAge.WithLabelValues(h).Set(s) },
			XminAge:     func(h string, x float64) { metrics.OldestXminAge.WithLabelValues(h).Set(x) },
		}})}
	r.retention = newRetention(c, pool, log)
	r.rotation = newRotation(c, pool, log)
	r.autovacuum = render(queryAutovacuum, cfg.Schema, nil)
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
	if err := r.registry.registerWithRetry(ctx); err != nil {
		if ctx.Err() != nil && !refusedToStart(err) {
			return nil // stopped before it started: nothing claimed
		}
		return err
	}
	// The history's partitions before the first claim: after a long
	// absence, the partition a settle's rows go to may not exist yet.
	r.retention.history.Maintain(ctx)
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
			r.settler.settleLoop(settleCtx, r.dispatcher.settle, live)
		})
	}
	// The mode's own work goes on until everything is settled.
	modeCtx, stopMode := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMode()
	var moding sync.WaitGroup
	moding.Go(func() { r.mode.runMode(modeCtx) })
	var background sync.WaitGroup
	background.Go(func() { r.gauges.refreshLoop(runCtx) })
	background.Go(func() { r.floor.Run(runCtx) })
	background.Go(func() { r.retention.retentionLoop(runCtx) })
	background.Go(func() { r.retention.history.Run(runCtx) })
	if r.rotation != nil {
		background.Go(func() { r.rotation.Run(runCtx) })
	}
	background.Go(func() { r.failures.logLoop(runCtx) })
	background.Go(func() { r.live.Run(runCtx) })
	if r.listener != nil {
		notified, unsubscribe := r.listener.Subscribe(r.cfg.Schema)
		defer unsubscribe()
		r.claims.notified = notified
		if r.ownListener {
			background.Go(func() { r.listener.Run(runCtx) })
		}
	}
	heartbeat := r.live.Start("heartbeat loop")
	background.Go(func() {
		defer heartbeat.Done()
		if err := r.registry.heartbeatLoop(runCtx, heartbeat); err != nil {
			r.log.Error("stopping", "err", err)
			stop(err)
		}
	})

	r.log.Info("relay started", "mode", r.cfg.Mode, "sinks", slices.Sorted(maps.Keys(r.cfg.Sinks)),
		"default_sink", r.cfg.DefaultSink, "batch_size", r.cfg.BatchSize, "lease", r.cfg.Lease)
	checkAutovacuum(runCtx, r.pool, r.autovacuum, r.cfg.Schema, r.log)
	var claiming sync.WaitGroup
	for i, c := range r.mode.claimers() {
		live := r.live.Start(fmt.Sprintf("claim loop %d (%s)", i+1, c.what))
		claiming.Go(func() {
			defer live.Done()
			r.claims.run(runCtx, deliverCtx, c, &r.claimHealth[i], live)
		})
	}
	claiming.Wait()
	r.draining.Store(true)

	inFlight := r.dispatcher.inflight.total()
	r.log.Info("draining: claiming stopped, waiting for in-flight deliveries",
		"num_in_flight", inFlight, "drain_timeout", r.cfg.DrainTimeout)
	cutoff := time.AfterFunc(r.cfg.DrainTimeout, cancelDeliveries)
	hardStop := time.AfterFunc(r.cfg.DrainTimeout+settleGrace, cancelSettle)
	defer hardStop.Stop()
	r.dispatcher.deliveries.Wait()
	cutoff.Stop()
	close(r.dispatcher.settle)
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
		if err := r.claimHealth[i].checkHealth(now); err != nil {
			return err
		}
	}
	if err := r.settleHealth.checkHealth(now); err != nil {
		return err
	}
	return r.watches.ready(now)
}

// Live reports whether the relay's engine still turns: nil while each of
// its claim loops, its settle loops, its heartbeat and (in partitioned
// mode) its bucket owner either waits or came round within the liveness
// threshold (three leases, at least two minutes), else an error naming
// the loops that are stuck. A relay that is merely waiting (for its
// database, for a sink, for rows, for its deliveries to drain at
// shutdown) is live: it recovers by itself, and a restart would not help.
// Ready says whether it can work; Live whether only a restart can make it
// work again.
func (r *Relay) Live() error {
	if err := r.live.Check(); err != nil {
		return fmt.Errorf("the relay no longer turns: %w", err)
	}
	return nil
}
