package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
)

// Relays record that they are alive every heartbeatInterval, each record
// given up after heartbeatTimeout; a relay not seen for aliveFor is taken
// for gone, and its row is deleted after forgetAfter.
const (
	heartbeatInterval = 10 * time.Second
	heartbeatTimeout  = heartbeatInterval / 2
	aliveFor          = 3 * heartbeatInterval
	forgetAfter       = 24 * time.Hour
)

// ModeConflictError is returned by Run when relays that run another mode are
// alive on the schema: the relay does not start.
type ModeConflictError struct {
	// Want is this relay's mode; Recorded is the schema's.
	Want, Recorded outbox.Mode
	// Alive names the relays alive in another mode, with their modes.
	Alive []string
}

func (e *ModeConflictError) Error() string {
	return fmt.Sprintf("this relay runs %s but the schema's relays run %s (alive: %s); every relay on a schema must run the same mode: "+
		"stop them all to switch modes (the first relay to start then switches the schema), or start this one in %s mode",
		e.Want, e.Recorded, strings.Join(e.Alive, ", "), e.Recorded)
}

// refusedToStart reports whether err is a refusal to start beside the
// schema's live relays (another mode or another default sink): Run returns
// it at once, not retried.
func refusedToStart(err error) bool {
	var mode *ModeConflictError
	var sink *SinkConflictError
	return errors.As(err, &mode) || errors.As(err, &sink)
}

// ModeChangedError is returned by Run when the schema's mode changed while
// the relay ran (another relay switched it after this one stopped sending
// heartbeats, say while it was paused): it stops rather than break order.
type ModeChangedError struct{ Want, Recorded outbox.Mode }

func (e *ModeChangedError) Error() string {
	return fmt.Sprintf("the schema's mode changed to %s while this relay ran %s: stopping (every relay on a schema must run the same mode)", e.Recorded, e.Want)
}

// SinkConflictError is returned by Run when relays alive on the schema send
// the rows without a destination to another sink (RELAY_SINK): the rows
// would go to one broker or the other depending on which relay claimed
// them. The relay does not start.
type SinkConflictError struct {
	// Want is this relay's default sink.
	Want string
	// Alive names the relays alive with another default sink, with it.
	Alive []string
}

func (e *SinkConflictError) Error() string {
	return fmt.Sprintf("this relay sends rows without a destination to sink %s but relays alive on the schema send them elsewhere (%s): "+
		"every relay on a schema must have the same default sink (RELAY_SINK), or rows would be split between them; "+
		"stop the others to change it, or give this relay the same default sink",
		e.Want, strings.Join(e.Alive, ", "))
}

// registry records the relay on its schema: at start (register) it
// checks the relay's mode and default sink against the relays alive,
// switching the schema's mode when none is, and then records that it is
// alive (heartbeatLoop).
type registry struct {
	cfg  *Config
	pool *pgxpool.Pool
	log  *slog.Logger
	q    registryQueries
	// floorLag is the claim floor's last lag in seconds, recorded at each
	// heartbeat; nil until the floor's first refresh.
	floorLag atomic.Pointer[float64]
}

// setFloorLag keeps the claim floor's lag for the next heartbeat.
func (g *registry) setFloorLag(d time.Duration) {
	s := d.Seconds()
	g.floorLag.Store(&s)
}

// registryQueries are the registry's statements, rendered.
type registryQueries struct {
	modeLock, modeRead, modeSwitch, modeSwitchLock, modeApply string
	relaysHeartbeat, relaysRestart, relaysLeave, relaysSinks  string
}

// newRegistry returns the registry of a relay with cfg.
func newRegistry(cfg *Config, pool *pgxpool.Pool, log *slog.Logger) *registry {
	f := func(q string) string { return render(q, cfg.Schema, nil) }
	return &registry{cfg: cfg, pool: pool, log: log, q: registryQueries{
		modeLock: f(queryModeLock), modeRead: f(queryModeRead), modeSwitch: f(queryModeSwitch),
		modeSwitchLock: f(queryModeSwitchLock), modeApply: f(queryModeApply),
		relaysHeartbeat: f(queryRelaysHeartbeat), relaysRestart: f(queryRelaysRestart),
		relaysLeave: f(queryRelaysLeave), relaysSinks: f(queryRelaysSinks),
	}}
}

// checkSinks compares the relay's sinks with those the live relays of the
// schema recorded, in tx: another default sink is a *SinkConflictError;
// other sinks are logged (a row for a sink one relay lacks is dead-lettered
// as no_sink by that relay).
func (g *registry) checkSinks(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, g.q.relaysSinks, pgx.StrictNamedArgs{"relay_id": g.cfg.ID, "alive": aliveFor})
	if err != nil {
		return fmt.Errorf("register relay: read the sinks of the relays alive: %w", err)
	}
	type alive struct {
		ID          string   `db:"id"`
		DefaultSink string   `db:"default_sink"`
		Sinks       []string `db:"sinks"`
	}
	others, err := pgx.CollectRows(rows, pgx.RowToStructByName[alive])
	if err != nil {
		return fmt.Errorf("register relay: read the sinks of the relays alive: %w", err)
	}
	mine := g.cfg.sinkNames()
	var conflict []string
	for _, o := range others {
		switch {
		case o.DefaultSink != g.cfg.DefaultSink:
			conflict = append(conflict, fmt.Sprintf("%s (default sink %s)", o.ID, o.DefaultSink))
		case !slices.Equal(o.Sinks, mine):
			g.log.Warn("a relay alive on this schema has other sinks: a row whose destination is a sink one relay lacks is dead-lettered by it as no_sink",
				"other_relay", o.ID, "its_sinks", o.Sinks, "sinks", mine)
		}
	}
	if len(conflict) > 0 {
		return &SinkConflictError{Want: g.cfg.DefaultSink, Alive: conflict}
	}
	return nil
}

// sinkNames returns the names of the relay's sinks, sorted.
func (c Config) sinkNames() []string {
	return slices.Sorted(maps.Keys(c.Sinks))
}

// register checks the relay's mode against the schema's and records the
// relay as alive. When the modes differ and no relay of the schema's mode is
// alive, it switches the schema to this relay's mode (switchStatements).
func (g *registry) register(ctx context.Context) error {
	tx, err := g.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("register relay: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, g.q.modeLock, pgx.StrictNamedArgs{"lock_name": "outbox-relay:mode:" + g.cfg.Schema}); err != nil {
		return fmt.Errorf("register relay: lock the schema's mode: %w", err)
	}
	want := g.cfg.Mode
	var recorded outbox.Mode
	var alive []string
	err = tx.QueryRow(ctx, g.q.modeRead, pgx.StrictNamedArgs{"relay_id": g.cfg.ID, "alive": aliveFor, "mode": want}).Scan(&recorded, &alive)
	if err != nil {
		return fmt.Errorf("register relay: read the schema's mode: %w", err)
	}
	if recorded != want {
		if len(alive) > 0 {
			return &ModeConflictError{Want: want, Recorded: recorded, Alive: alive}
		}
		if err := g.switchMode(ctx, tx, recorded); err != nil {
			return err
		}
	}
	if err := g.checkSinks(ctx, tx); err != nil {
		return err
	}
	// The insert triggers of the mode: set by a switch, and repaired here
	// when something else (a restore, a hand edit) left them wrong.
	if _, err := tx.Exec(ctx, g.q.modeApply); err != nil {
		return fmt.Errorf("register relay: enable the insert triggers of %s mode: %w", want, err)
	}
	if _, err := g.recordHeartbeat(ctx, tx); err != nil {
		return fmt.Errorf("register relay: %w", err)
	}
	if _, err := tx.Exec(ctx, g.q.relaysRestart, pgx.StrictNamedArgs{"relay_id": g.cfg.ID}); err != nil {
		return fmt.Errorf("register relay: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("register relay: %w", err)
	}
	return nil
}

// switchMode records this relay's mode as the schema's, in tx, and runs
// the switch's statements with producers held out.
func (g *registry) switchMode(ctx context.Context, tx pgx.Tx, from outbox.Mode) error {
	want := g.cfg.Mode
	if _, err := tx.Exec(ctx, g.q.modeSwitchLock); err != nil {
		return fmt.Errorf("switch the schema to %s mode: hold producers back: %w", want, err)
	}
	if _, err := tx.Exec(ctx, g.q.modeSwitch, pgx.StrictNamedArgs{"mode": want, "relay_id": g.cfg.ID}); err != nil {
		return fmt.Errorf("switch the schema to %s mode: %w", want, err)
	}
	for _, stmt := range switchStatements(g.cfg.Schema, from, want) {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("switch the schema to %s mode: %w", want, err)
		}
	}
	g.log.Warn("switched the schema's delivery mode: no other relay was alive", "from", from, "to", want)
	return nil
}

// queryRower runs a statement that returns one row: a pool, or a
// transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// recordHeartbeat registers the relay or records that it is alive, through db,
// and returns the schema's mode.
func (g *registry) recordHeartbeat(ctx context.Context, db queryRower) (outbox.Mode, error) {
	var recorded outbox.Mode
	err := db.QueryRow(ctx, g.q.relaysHeartbeat, pgx.StrictNamedArgs{
		"relay_id": g.cfg.ID, "version": g.cfg.Version, "mode": g.cfg.Mode, "notify": g.cfg.Notify,
		"default_sink": g.cfg.DefaultSink, "sinks": g.cfg.sinkNames(), "claim_floor_lag": g.floorLag.Load(),
	}).Scan(&recorded)
	return recorded, err
}

// heartbeatLoop records every heartbeatInterval that the relay is alive and
// checks that the schema's mode is still its own; it returns an error when
// the mode changed. At a clean shutdown the relay leaves the registry. Each
// record is given up after heartbeatTimeout: a database that stops
// answering without closing the connection (a network partition, a proxy
// that hangs) must not hold the loop. It beats live once per record.
func (g *registry) heartbeatLoop(ctx context.Context, live *liveness.Loop) error {
	t := time.NewTicker(heartbeatInterval)
	defer t.Stop()
	for {
		live.Wait()
		select {
		case <-ctx.Done():
			leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_, _ = g.pool.Exec(leaveCtx, g.q.relaysLeave, pgx.StrictNamedArgs{"relay_id": g.cfg.ID})
			return nil
		case <-t.C:
		}
		live.Beat()
		beatCtx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
		recorded, err := g.recordHeartbeat(beatCtx, g.pool)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			g.log.Warn("record heartbeat", "err", err)
		case err == nil && recorded != g.cfg.Mode:
			return &ModeChangedError{Want: g.cfg.Mode, Recorded: recorded}
		}
	}
}

// registerWithRetry registers the relay (register), retrying while the
// database fails and ctx lasts; a refusal to start beside the live relays
// (refusedToStart) is returned at once.
func (g *registry) registerWithRetry(ctx context.Context) error {
	wait := 250 * time.Millisecond
	for {
		err := g.register(ctx)
		if err == nil || refusedToStart(err) || ctx.Err() != nil {
			return err
		}
		g.log.Warn("could not register on the schema; retrying", "err", err, "retry_in", wait)
		sleep(ctx, wait)
		wait = min(2*wait, 5*time.Second)
	}
}
