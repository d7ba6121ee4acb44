package relay

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// unordered is the default mode: every relay claims any due row (two claim
// loops, SELECT … FOR UPDATE SKIP LOCKED) and delivers a batch at once;
// rows have no order between them.
type unordered struct {
	e      *engine
	claim  string
	settle settleStatements
}

func newUnordered(e *engine) *unordered {
	return &unordered{
		e:      e,
		claim:  renderClaim(e.cfg.Schema, ""),
		settle: renderSettle(e.cfg.Schema, settleSlots{}, true),
	}
}

// claimers returns two loops that claim any due row: while one waits for
// its statement, the other can claim; the second follows the first while
// idle.
func (m *unordered) claimers() []claimer {
	c := claimer{what: "rows", claim: m.e.claims.claimFunc(m.claim)}
	second := c
	second.follower = true
	return []claimer{c, second}
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
