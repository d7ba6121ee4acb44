package buckets

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what an Owner needs of the database: a pgxpool.Pool.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Hooks report an Owner's changes, for metrics. Every field is optional.
type Hooks struct {
	// Changed counts n buckets acquired, released or lost (change).
	Changed func(change string, n int)
	// HandedOver observes the time from the decision to give a bucket up
	// to its release.
	HandedOver func(time.Duration)
	// Owned reports how many buckets the relay owns after a round.
	Owned func(n int)
	// Round learns the outcome of every round (nil: it went through), so
	// that the relay reports failures as it reports its other ones.
	Round func(err error)
}

// The changes Hooks.Changed reports.
const (
	ChangeAcquired = "acquired"
	ChangeReleased = "released"
	ChangeLost     = "lost"
)

// Changes lists every change Hooks.Changed reports.
var Changes = []string{ChangeAcquired, ChangeReleased, ChangeLost}

// Config configures an Owner.
type Config struct {
	// DB reaches the schema's tables.
	DB DB
	// Schema is the plain schema name, QuotedSchema the same quoted.
	Schema, QuotedSchema string
	// RelayID names the relay in the buckets table.
	RelayID string
	// RowLease is the relays' row lease (RELAY_LEASE): Times follow from it.
	RowLease time.Duration
	// Heartbeat records, in a round's transaction, that the relay is alive:
	// the relays alive are those that share the buckets.
	Heartbeat func(ctx context.Context, tx pgx.Tx) error
	// Logger receives the owner's logs.
	Logger *slog.Logger
	// Hooks report its changes.
	Hooks Hooks
}

// Owner keeps a relay's share of the buckets: it runs the rounds (Run) and
// holds the State that the relay's claims and settles consult.
type Owner struct {
	*State
	cfg   Config
	times Times
	alive atomic.Int64
	// live is the relays alive at the last round, changed when they last
	// changed (the zero time before the first round): Run's goroutine only.
	live    []string
	changed time.Time
}

// NewOwner returns an owner that owns no bucket yet.
func NewOwner(cfg Config) *Owner {
	h := &cfg.Hooks
	if h.Changed == nil {
		h.Changed = func(string, int) {}
	}
	if h.HandedOver == nil {
		h.HandedOver = func(time.Duration) {}
	}
	if h.Owned == nil {
		h.Owned = func(int) {}
	}
	if h.Round == nil {
		h.Round = func(error) {}
	}
	return &Owner{State: NewState(), cfg: cfg, times: TimesFor(cfg.RowLease)}
}

// Alive returns how many relays shared the buckets at the last round (0
// before the first).
func (o *Owner) Alive() int { return int(o.alive.Load()) }

// Lock opens a round in tx: it takes the schema's bucket lock, and has the
// server end the session when it stays idle in the transaction for idle.
func Lock(ctx context.Context, tx pgx.Tx, schema string, idle time.Duration) error {
	_, err := tx.Exec(ctx, queryLock, pgx.StrictNamedArgs{
		"idle_ms":   strconv.FormatInt(idle.Milliseconds(), 10),
		"lock_name": "outbox-relay:buckets:" + schema,
	})
	return err
}

// Run runs a round every renewal interval until ctx ends, then releases
// every bucket the relay owns: the relay has stopped and settled
// everything, and the others may take them at once. Handovers go faster
// than the interval: a bucket being given up is released as soon as its
// rows in flight are settled, and a relay short of its share, or whose
// rounds saw the relays alive change within Times.Forming, runs its next
// round after a fifth of the interval (soon).
func (o *Owner) Run(ctx context.Context) {
	t := time.NewTicker(o.times.Renew)
	defer t.Stop()
	for {
		short, err := o.round(ctx)
		if err == nil || ctx.Err() == nil {
			o.cfg.Hooks.Round(err)
		}
		t.Reset(o.times.Renew) // a renewal after this round, not between sooner ones
		var soon <-chan time.Time
		if o.soon(short, time.Now()) {
			soon = time.After(o.times.Renew / 5)
		}
		select {
		case <-ctx.Done():
			o.releaseAll(context.WithoutCancel(ctx))
			return
		case <-t.C:
		case <-soon:
		case <-o.Drained():
		}
	}
}

// soon reports whether the next round comes after a fifth of the renewal
// interval rather than a whole one: while the relay is short of its share
// or giving buckets up (short), or within Times.Forming of the last change
// its rounds saw in the relays alive, its first round included.
func (o *Owner) soon(short bool, now time.Time) bool {
	return short || (!o.changed.IsZero() && now.Sub(o.changed) < o.times.Forming)
}

// round runs one round, in one transaction that holds the schema's bucket
// lock (so that relays rebalance one after the other, each seeing the
// others' changes): it records that the relay is alive, renews its buckets
// (those it no longer holds are lost), computes its share of the buckets
// over the relays alive, gives up what it has beyond it (each bucket once
// its rows in flight are settled) and acquires free buckets up to it.
// Moves are as few as the shares allow: a relay releases only its excess
// and acquires only its deficit. It reports whether the relay is still
// short of its share, or still giving buckets up.
func (o *Owner) round(ctx context.Context) (short bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.times.RenewWithin-o.cfg.RowLease)
	defer cancel()
	tx, err := o.cfg.DB.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("rebalance buckets: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := Lock(ctx, tx, o.cfg.Schema, 2*o.times.Renew); err != nil {
		return false, fmt.Errorf("rebalance buckets: lock: %w", err)
	}
	if err := o.cfg.Heartbeat(ctx, tx); err != nil {
		return false, fmt.Errorf("rebalance buckets: heartbeat: %w", err)
	}
	q := func(sql string) string { return render(sql, o.cfg.QuotedSchema) }
	renewed, err := epochsOf(tx.Query(ctx, q(queryRenew), pgx.StrictNamedArgs{"relay_id": o.cfg.RelayID, "lease": o.times.Lease, "renew_within": o.times.RenewWithin}))
	if err != nil {
		return false, fmt.Errorf("rebalance buckets: renew: %w", err)
	}
	rows, err := tx.Query(ctx, q(queryLive), pgx.StrictNamedArgs{"alive": o.times.Alive})
	if err != nil {
		return false, fmt.Errorf("rebalance buckets: read relays: %w", err)
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("rebalance buckets: read relays: %w", err)
	}
	target := Share(max(slices.Index(live, o.cfg.RelayID), 0), len(live))
	o.alive.Store(int64(len(live)))
	if o.changed.IsZero() || !slices.Equal(live, o.live) {
		o.live, o.changed = live, time.Now()
	}

	plan := o.Reconcile(renewed, target, o.cfg.RowLease, time.Now())
	if len(plan.Lost) > 0 {
		o.cfg.Hooks.Changed(ChangeLost, len(plan.Lost))
		o.cfg.Logger.Warn("lost buckets: their leases ran out before this relay renewed them (paused, cut off from the database); their rows in flight will not be settled here",
			"buckets", plan.Lost)
	}
	if len(plan.Release) > 0 {
		_, err := tx.Exec(ctx, q(queryRelease), pgx.StrictNamedArgs{"relay_id": o.cfg.RelayID, "buckets": plan.Release, "epochs": plan.Epochs})
		if err != nil {
			return false, fmt.Errorf("rebalance buckets: release: %w", err)
		}
	}
	acquired := map[int32]int64{}
	if plan.Want > 0 {
		acquired, err = epochsOf(tx.Query(ctx, q(queryAcquire), pgx.StrictNamedArgs{"relay_id": o.cfg.RelayID, "lease": o.times.Lease, "want": plan.Want}))
		if err != nil {
			return false, fmt.Errorf("rebalance buckets: acquire: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("rebalance buckets: %w", err)
	}
	if len(plan.Release) > 0 {
		o.Drop(plan.Release, plan.Epochs)
		o.cfg.Hooks.Changed(ChangeReleased, len(plan.Release))
		for _, at := range plan.DecidedAt {
			o.cfg.Hooks.HandedOver(time.Since(at))
		}
		o.cfg.Logger.Info("released buckets", "buckets", plan.Release, "epochs", plan.Epochs, "relays_alive", len(live), "share", target)
	}
	if len(acquired) > 0 {
		ids := o.Add(acquired)
		epochs := make([]int64, len(ids))
		for i, id := range ids {
			epochs[i] = acquired[id]
		}
		o.cfg.Hooks.Changed(ChangeAcquired, len(ids))
		o.cfg.Logger.Info("acquired buckets", "buckets", ids, "epochs", epochs, "relays_alive", len(live), "share", target)
	}
	o.cfg.Hooks.Owned(o.Owned())
	return len(acquired) < plan.Want || o.Releasing(), nil
}

// epochsOf reads the (bucket, epoch) rows that renewing and acquiring
// buckets return.
func epochsOf(rows pgx.Rows, err error) (map[int32]int64, error) {
	if err != nil {
		return nil, err
	}
	epochs := map[int32]int64{}
	var id int32
	var epoch int64
	_, err = pgx.ForEachRow(rows, []any{&id, &epoch}, func() error {
		epochs[id] = epoch
		return nil
	})
	return epochs, err
}

// releaseAll gives up every bucket the relay owns, at shutdown.
func (o *Owner) releaseAll(ctx context.Context) {
	ids, epochs := o.All()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := o.cfg.DB.Exec(ctx, render(queryRelease, o.cfg.QuotedSchema), pgx.StrictNamedArgs{"relay_id": o.cfg.RelayID, "buckets": ids, "epochs": epochs})
	if err != nil {
		o.cfg.Logger.Warn("could not release buckets at shutdown; the other relays take them when their leases run out",
			"num_buckets", len(ids), "err", err)
		return
	}
	o.Drop(ids, epochs)
	o.cfg.Hooks.Changed(ChangeReleased, len(ids))
	o.cfg.Hooks.Owned(0)
	slices.Sort(ids)
	o.cfg.Logger.Info("released buckets at shutdown", "buckets", ids)
}
