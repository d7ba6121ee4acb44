package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ordered delivers the rows of a key one at a time, in insert order,
// across relays: a keyed row is claimed only as its key's head, its oldest
// row, or in the head's run, the rows that follow it in the same claim
// (queryHeadsClaim), which go out one after the other (deliverInKeyOrder),
// or behind the key's rows in flight in this relay, which it follows
// (relay/internal/keychain); the rows behind a key in flight in another
// relay wait out of the claims' way until its settle makes the next one a
// candidate (sql_heads.go has the protocol).
// Rows without a key are claimed by a loop of their own and never held up.
// See doc.go.
type ordered struct {
	e                             *engine
	claimUnkeyed, claimHeads      string
	repairHeads, backlog, blocked string
	settle                        settleStatements
	// markAfter is markWaitingAfter (tests that need every row marked
	// set it to 0).
	markAfter time.Duration
	// wake wakes the head claimers after a settle: a key's next row is
	// claimable as soon as its head is settled.
	wake chan struct{}
	// claimingHeads lets one claim of heads of this relay run at a time:
	// a claim that overlapped another met the heads that one was leasing
	// as due rows nobody held, and marked the rows behind them waiting,
	// each a write and a promotion later (200k burst over 5,000 keys, four
	// relays in one process: 13.9-14.1k events/s against 12.1-13.7k, and
	// PostgreSQL 8.7-9.0 s per 100k against 9.7-11.0). One that waits for
	// its turn when shutdown begins claims nothing.
	claimingHeads claimTurn
}

// markWaitingAfter is how long a head's delivery may be under way before
// the claims mark the rows behind it waiting (queryHeadsClaim).
const markWaitingAfter = 100 * time.Millisecond

// claimLockWait is the longest a claim of heads waits for a lock
// (queryHeadsClaim's @lock_wait).
const claimLockWait = 100 * time.Millisecond

// lockNotAvailable is the SQLSTATE of a lock wait given up after
// lock_timeout.
const lockNotAvailable = "55P03"

// headsLockName names the advisory lock that lets one claim of heads run
// at a time in schema (queryHeadsClaim).
func headsLockName(schema string) string { return "outbox-relay:heads:" + schema }

// headsWalkShare is the share of a claim's rows (claimRequest.limit) that
// its walk of candidates takes at most (@walk): the heads among them, then
// their runs, fill the claim.
const headsWalkShare = 4

// headsRepairCap bounds the waiting rows one repair makes candidates.
const headsRepairCap = 10_000

// blockedKeysCap bounds the heads a refresh looks at for blocked keys.
const blockedKeysCap = 10_000

func newOrdered(e *engine) *ordered {
	s := e.cfg.Schema
	settle := renderSettle(s, settleSlots{}, true)
	// A settle that deletes heads makes their keys' next rows candidates,
	// in a statement of its own after the delete.
	settle.then = render(queryHeadsPromote, s, nil)
	return &ordered{
		e:             e,
		claimUnkeyed:  renderClaim(s, unkeyedOnly),
		claimHeads:    render(queryHeadsClaim, s, nil),
		repairHeads:   render(queryHeadsRepair, s, nil),
		backlog:       render(queryHeadsBacklog, s, nil),
		blocked:       render(queryHeadsBlocked, s, nil),
		settle:        settle,
		markAfter:     markWaitingAfter,
		wake:          make(chan struct{}, 1),
		claimingHeads: newClaimTurn(),
	}
}

// claimers returns two loops that claim the heads of keys, woken by
// settles, and one for the rows without a key, which looks again soon
// after an empty claim while a stream flows (streamPause).
func (m *ordered) claimers() []claimer {
	heads := claimer{what: "heads of keys", claim: m.claimHeadsOfKeys, wake: m.wake}
	second := heads
	second.follower = true
	unkeyed := claimer{what: "rows without a key", claim: m.e.claims.claimFunc(m.claimUnkeyed), eagerPause: m.e.streamPause, eagerPauses: streamPauses}
	return []claimer{heads, second, unkeyed}
}

// headsClaimArgs returns the arguments of queryHeadsClaim for req.
func (m *ordered) headsClaimArgs(req claimRequest) pgx.StrictNamedArgs {
	args := m.e.idFloorArgs(m.e.claims.claimArgs(req))
	args["walk"] = max(req.limit/headsWalkShare, 1)
	args["mark_after"] = m.markAfter
	args["lock_wait"] = fmt.Sprintf("%dms", claimLockWait.Milliseconds())
	args["heads_lock"] = headsLockName(m.e.cfg.Schema)
	args["keys_in_flight"] = "{}" // runChainedClaim sets them once its chains' links are kept
	return args
}

// claimHeadsOfKeys leases the heads among the due candidates, with their runs, and
// marks the others waiting (queryHeadsClaim). A claimHeadsOfKeys that gave up a lock wait (it would
// have waited for a settle that may wait for it) found nothing: the
// settle wakes the loop when it is done.
func (m *ordered) claimHeadsOfKeys(ctx context.Context, req claimRequest) ([]claimedRow, error) {
	// With the claim's plan (claimRunner.inIndexOrder), as every claim: the
	// lookups of each key's oldest row and run must walk messages_key_idx in
	// order and stop. Planned on a hot table's stale statistics, each was a
	// bitmap scan that read and sorted all of its key's rows: with 100 keys
	// 367 rows deep under a pinned horizon, 37k buffers and 1.5 s a claim,
	// which leased nothing while the backlog grew.
	if ok, err := m.claimingHeads.take(ctx, req.stopping); !ok {
		if err != nil {
			return nil, fmt.Errorf("claim heads of keys: waiting for the other loop's claim: %w", err)
		}
		return nil, nil
	}
	defer m.claimingHeads.release()
	var free bool
	if err := m.e.pool.QueryRow(ctx, queryHeadsLockFree, pgx.StrictNamedArgs{"heads_lock": headsLockName(m.e.cfg.Schema)}).Scan(&free); err != nil {
		return nil, fmt.Errorf("claim heads of keys: is another relay's claim of heads under way: %w", err)
	} else if !free {
		m.e.metrics.HeadsClaimsBusy.Inc()
		return nil, nil
	}
	select {
	case <-req.stopping: // begun while it asked: rows leased now would only wait
		return nil, nil
	default:
	}
	batch, _, err := m.e.runChainedClaim(ctx, m.claimHeads, m.headsClaimArgs(req), req, "claim heads of keys")
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
		m.e.log.Debug("a claim of heads gave up waiting for a row another transaction is changing", "err", err)
		return nil, nil
	}
	return batch, err
}

// deliverBatch sends a key's run one row after the other.
func (m *ordered) deliverBatch(ctx context.Context, d *sinkDelivery) {
	deliverInKeyOrder(ctx, d, m.e.chains)
}

func (m *ordered) settleStatements() settleStatements { return m.settle }

// oldestClaimable leaves the rows waiting on their key out of the claim
// floor (oldestCandidate): a row that waits behind a head failing for an
// hour would hold the floor, and every claim would walk what was delivered
// since.
func (m *ordered) oldestClaimable() string { return oldestCandidate }

func (m *ordered) fenceArgs([]rowOutcome) pgx.StrictNamedArgs { return nil }

// afterSettle wakes the head claimers: the keys of the afterSettle heads have their
// next rows claimable.
func (m *ordered) afterSettle([]rowOutcome) {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// repairInterval is how often ordered mode repairs its keys.
const repairInterval = time.Minute

// runMode repairs the keys every repairInterval (queryHeadsRepair).
func (m *ordered) runMode(ctx context.Context) {
	t := time.NewTicker(repairInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.repair(ctx)
		}
	}
}

// repair makes candidates again the waiting rows no older row of their key
// holds up (queryHeadsRepair), and says so: they would wait for ever, and
// the settles leave none.
func (m *ordered) repair(ctx context.Context) {
	rows, err := m.e.pool.Query(ctx, m.repairHeads, planPerExecution, m.e.idFloorArgs(pgx.StrictNamedArgs{"cap": headsRepairCap}))
	if err != nil {
		if ctx.Err() == nil {
			m.e.log.Warn("repair keys", "err", err)
		}
		return
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		if ctx.Err() == nil {
			m.e.log.Warn("repair keys", "err", err)
		}
		return
	}
	if len(keys) > 0 {
		m.e.metrics.LanesRepaired.Add(float64(len(keys)))
		m.e.log.Error("made rows claimable that waited behind no older row of their key (a row deleted by hand, or written with the relay's waiting column set)",
			"num_rows", len(keys), "first_key", keys[0])
	}
}

// countDue counts the rows without a key that are due and the due
// candidates (rows waiting behind their key's head are not due), with their
// oldest due times, and the blocked keys and the rows waiting on their key.
func (m *ordered) countDue(ctx context.Context, r *gaugeReadings) error {
	r.OldestKnown = true
	rows, err := m.e.pool.Query(ctx, m.backlog, planPerExecution, pgx.StrictNamedArgs{"default_sink": m.e.cfg.DefaultSink, "cap": gaugeCountCap, "floor": m.e.floor.Current()})
	if err != nil {
		return fmt.Errorf("query backlog: %w", err)
	}
	var sink string
	var due int64
	var oldest *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&sink, &due, &oldest}, func() error {
		r.addDue(sink, due, oldest)
		return nil
	}); err != nil {
		return fmt.Errorf("query backlog: %w", err)
	}
	var blocked, waiting int64
	err = m.e.pool.QueryRow(ctx, m.blocked, planPerExecution, pgx.StrictNamedArgs{"heads_cap": blockedKeysCap, "cap": gaugeCountCap}).Scan(&blocked, &waiting)
	if err != nil {
		return fmt.Errorf("count blocked keys: %w", err)
	}
	r.BlockedKeys, r.WaitingOnKey = &blocked, &waiting
	return nil
}
