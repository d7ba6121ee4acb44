package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ordered delivers the rows of a key one at a time, in insert order,
// across relays: each key with rows has a lane (the lanes table, opened by
// the producers' insert trigger), and a keyed row is claimed only as its
// lane's head (queryLanesClaim). Rows without a key are claimed by a loop
// of their own and never held up. See doc.go.
type ordered struct {
	r                                         *Relay
	claimUnkeyed, claimLanes                  string
	pruneLanes, repairLanes, backlog, blocked string
	settle                                    settleStatements
	// wake wakes the lane claimers after a settle: a key's next row is
	// claimable as soon as its head is settled.
	wake chan struct{}
}

// laneRecheck is how long a lane whose head's sink is closed waits before a
// claim looks at it again.
const laneRecheck = time.Second

// laneRepairEvery is how many retention intervals pass between two
// repairs of the lanes (the first comes after one).
const laneRepairEvery = 10

// blockedKeysCap bounds the lanes a refresh looks at for blocked keys.
const blockedKeysCap = 10_000

func newOrdered(r *Relay) *ordered {
	s := r.cfg.Schema
	return &ordered{
		r:            r,
		claimUnkeyed: renderClaim(s, unkeyedOnly),
		claimLanes:   render(queryLanesClaim, s, nil),
		pruneLanes:   render(queryLanesPrune, s, nil),
		repairLanes:  render(queryLanesRepair, s, nil),
		backlog:      render(queryLanesBacklog, s, nil),
		blocked:      render(queryLanesBlocked, s, nil),
		// A settle moves the lanes of its heads, so every settle runs
		// the whole statement.
		settle: renderSettle(s, settleSlots{after: settleLanes}, false),
		wake:   make(chan struct{}, 1),
	}
}

// claimers returns two loops that claim the heads of keys through their
// lanes, woken by settles, and one for the rows without a key.
func (m *ordered) claimers() []claimer {
	heads := claimer{what: "heads of keys", claim: m.claimHeads, wake: m.wake, batch: max(m.r.cfg.BatchSize/4, 1)}
	second := heads
	second.follower = true
	return []claimer{heads, second, {what: "rows without a key", claim: m.r.claimWith(m.claimUnkeyed)}}
}

// lanesClaimArgs returns the arguments of queryLanesClaim for req.
func (m *ordered) lanesClaimArgs(req claimRequest) pgx.StrictNamedArgs {
	args := m.r.claimArgs(req)
	args["recheck"] = laneRecheck
	delete(args, "floor") // lanes have their own due index
	m.r.idFloorArgs(args)
	return args
}

// claimHeads leases the heads of due lanes (queryLanesClaim), then prunes
// the lanes it found empty.
func (m *ordered) claimHeads(ctx context.Context, req claimRequest) ([]claimed, error) {
	batch, empty, err := m.r.claimRows(ctx, m.claimLanes, m.lanesClaimArgs(req), req, "claim heads of keys")
	if err != nil {
		return nil, err
	}
	if len(empty) > 0 {
		keys := make([]string, len(empty))
		for i := range empty {
			keys[i] = empty[i].key
		}
		// The rows are leased already: a failed prune only leaves the
		// lanes for a later claim to find empty again.
		if _, err := m.r.pool.Exec(ctx, m.pruneLanes, pgx.StrictNamedArgs{"keys": keys}); err != nil {
			m.r.log.Warn("prune empty lanes", "num_lanes", len(keys), "err", err)
		}
	}
	return batch, nil
}

func (m *ordered) deliver(ctx context.Context, d *delivery) { d.all(ctx) }

func (m *ordered) settleStatements() settleStatements { return m.settle }

func (m *ordered) fence([]outcome) pgx.StrictNamedArgs { return nil }

// settled wakes the lane claimers: the settled heads left their lanes, and
// their keys' next rows are claimable.
func (m *ordered) settled([]outcome) {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// run repairs the lanes after a retention interval and every
// laneRepairEvery intervals after that.
func (m *ordered) run(ctx context.Context) {
	t := time.NewTicker(retentionInterval)
	defer t.Stop()
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if round%laneRepairEvery == 0 {
				m.repair(ctx)
			}
		}
	}
}

// repair opens lanes for keys that have rows but no lane
// (queryLanesRepair) and says so: such rows would wait for ever, and the
// lanes' protocol says there should be none.
func (m *ordered) repair(ctx context.Context) {
	rows, err := m.r.pool.Query(ctx, m.repairLanes)
	if err != nil {
		if ctx.Err() == nil {
			m.r.log.Warn("repair lanes", "err", err)
		}
		return
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		if ctx.Err() == nil {
			m.r.log.Warn("repair lanes", "err", err)
		}
		return
	}
	if len(keys) > 0 {
		m.r.metrics.LanesRepaired.Add(float64(len(keys)))
		m.r.log.Error("opened lanes for keys whose rows had none: their rows were waiting for no claim (please report this)",
			"num_keys", len(keys), "first_key", keys[0])
	}
}

// countDue counts the rows without a key that are due and the heads of due
// lanes (rows waiting behind their key's head are not due), with their
// oldest due times, and sets the blocked keys and the rows waiting on their
// key.
func (m *ordered) countDue(ctx context.Context, add func(sink string, due int64, oldest *time.Time)) (bool, error) {
	rows, err := m.r.pool.Query(ctx, m.backlog, m.r.idFloorArgs(pgx.StrictNamedArgs{"default_sink": m.r.cfg.DefaultSink, "cap": gaugeCountCap}))
	if err != nil {
		return true, fmt.Errorf("query backlog: %w", err)
	}
	var sink string
	var due int64
	var oldest *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&sink, &due, &oldest}, func() error {
		add(sink, due, oldest)
		return nil
	}); err != nil {
		return true, fmt.Errorf("query backlog: %w", err)
	}
	var blocked, waiting int64
	err = m.r.pool.QueryRow(ctx, m.blocked, m.r.idFloorArgs(pgx.StrictNamedArgs{"lanes_cap": blockedKeysCap, "cap": gaugeCountCap})).Scan(&blocked, &waiting)
	if err != nil {
		return true, fmt.Errorf("count blocked keys: %w", err)
	}
	m.r.metrics.BlockedKeys.Set(float64(blocked))
	m.r.metrics.WaitingOnKey.Set(float64(waiting))
	return true, nil
}
