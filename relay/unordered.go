package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// unordered is the default mode: every relay claims any due row (two claim
// loops, SELECT … FOR UPDATE SKIP LOCKED) and delivers a batch at once;
// rows have no order between them.
type unordered struct {
	r      *Relay
	claim  string
	settle settleStatements
}

func newUnordered(r *Relay) *unordered {
	return &unordered{
		r:      r,
		claim:  renderClaim(r.cfg.Schema, ""),
		settle: renderSettle(r.cfg.Schema, settleSlots{}, true),
	}
}

// claimers returns two loops that claim any due row: while one waits for
// its statement, the other can claim; the second follows the first while
// idle.
func (m *unordered) claimers() []claimer {
	c := claimer{what: "rows", claim: m.r.claimWith(m.claim)}
	second := c
	second.follower = true
	return []claimer{c, second}
}

func (m *unordered) deliver(ctx context.Context, d *delivery) { d.all(ctx) }

func (m *unordered) settleStatements() settleStatements { return m.settle }

func (m *unordered) oldestClaimable() string { return oldestRow }

func (m *unordered) fence([]outcome) pgx.StrictNamedArgs { return nil }

func (m *unordered) settled([]outcome) {}

func (m *unordered) run(context.Context) {}

func (m *unordered) countDue(ctx context.Context, add func(sink string, due int64, oldest *time.Time)) (bool, error) {
	return false, m.r.countDueRows(ctx, add)
}
