package relay

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// unordered is the default mode: every relay claims any due row (two claim
// loops, SELECT … FOR UPDATE SKIP LOCKED) and delivers a batch at once;
// rows have no order between them.
type unordered struct {
	e      *engine
	claim  string
	settle settleStatements
	// claiming lets one claim of this relay run at a time while a backlog
	// drains (draining: the last claim took all it asked for). Two that
	// overlap then walk the same rows: the later one meets each row the
	// earlier one is locking and skips it only after trying its lock, the
	// slowest way a claim passes a row. A steady stream's claims find a
	// few rows each and overlap little; made to wait for each other, one
	// claim held up by the server held up both loops (10k rows/s: p99
	// 10-34 ms against 11-20 ms), so they still may. One that waits for
	// its turn when shutdown begins claims nothing.
	claiming claimTurn
	draining atomic.Bool
	// cursor is where the last full claim ended: while a backlog drains,
	// claims walk from there, past the rows in flight (claimCursor).
	cursor claimCursor
}

func newUnordered(e *engine) *unordered {
	return &unordered{
		e:        e,
		claim:    renderClaim(e.cfg.Schema, ""),
		settle:   renderSettle(e.cfg.Schema, settleSlots{}, true),
		claiming: newClaimTurn(),
	}
}

// claimers returns two loops that claim any due row, one claim at a time
// while a backlog drains (claiming), then from where the last one ended
// (cursor): while one delivers its batch or waits for room in flight, the
// other can claim; the second follows the first while idle. The first
// looks again soon after an empty claim while a stream flows
// (streamPause).
func (m *unordered) claimers() []claimer {
	c := claimer{what: "rows", claim: m.claimRows}
	second := c
	second.follower = true
	c.eagerPause, c.eagerPauses = m.e.streamPause, streamPauses
	return []claimer{c, second}
}

// claimRows leases up to req's limit of due rows (queryMessagesClaim):
// after the other loop's claim while the relay is draining (claiming), and
// from where the cursor says (claimCursor), which it then moves. Waiting
// for its turn, it claims nothing once shutdown begins (req.stopping): the
// rows would only be delivered in the shutdown's grace, or released.
func (m *unordered) claimRows(ctx context.Context, req claimRequest) ([]claimedRow, error) {
	if m.draining.Load() {
		if ok, err := m.claiming.take(ctx, req.stopping); !ok {
			if err != nil {
				return nil, fmt.Errorf("claim batch: waiting for the other loop's claim: %w", err)
			}
			return nil, nil
		}
		defer m.claiming.release()
	}
	batch, _, err := m.e.claims.runClaim(ctx, m.claim, m.e.claims.messagesClaimArgs(req, &m.cursor), req, "claim batch")
	full := err == nil && len(batch) == req.limit && len(batch) > 0
	at, id := lastInWalk(batch)
	m.cursor.claimed(at, id, full)
	m.draining.Store(full)
	return batch, err
}

func (m *unordered) deliverBatch(ctx context.Context, d *sinkDelivery) { d.sendAll(ctx) }

func (m *unordered) settleStatements() settleStatements { return m.settle }

func (m *unordered) oldestClaimable() string { return oldestRow }

func (m *unordered) fenceArgs([]rowOutcome) pgx.StrictNamedArgs { return nil }

func (m *unordered) afterSettle([]rowOutcome) {}

func (m *unordered) runMode(context.Context) {}

func (m *unordered) countDue(ctx context.Context, r *gaugeReadings) error {
	return m.e.countDueRows(ctx, r)
}
