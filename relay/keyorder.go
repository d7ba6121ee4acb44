package relay

import (
	"context"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/internal/keychain"
)

// deliverInKeyOrder sends d keeping each key's order, for a mode whose
// claims link a key's rows into a chain (engine.chainKeys,
// relay/internal/keychain): a keyed row (a row whose key is ” has one:
// claimTag.keyed) reaches the sink only once the row it follows has
// passed (delivered, or dead-lettered, which ends its hold on the key),
// whether that row is in d, in another delivery, or in an earlier batch
// still in flight. It sends in waves: each holds every row that may go (the
// rows without a key, each key's next row, and the rows of d behind it,
// which the wave sends in rounds: sendInRounds), and the next one follows
// once the sink has answered for it, or, when nothing may go yet, once a
// link resolves. A key's rows in d thus go out in one delivery, a round
// trip each, and the settles follow behind, batched. When the row a keyed
// row follows was not delivered (to be retried, released, or unknown to
// this relay), the row is released without an attempt, and so the rest of
// its key behind it: the claim takes none of them again while that row is
// left. Rows still waiting at the deadline, or at shutdown, are released.
// d holds a key's rows in id order (the claim's order).
func deliverInKeyOrder(ctx context.Context, d *sinkDelivery, chains *keychain.Chains) {
	waves := *d
	order := keyOrder{chains: chains, tags: d.tags, skipped: make([]bool, len(d.msgs))}
	waves.also = append(slices.Clip(d.also), order)
	// rowOf finds the row of d a link belongs to; inWave is a row's
	// position in the wave being made, plus one.
	rowOf := make(map[*keychain.Link]int, len(d.msgs))
	for i, t := range d.tags {
		if t.keyed {
			rowOf[t.self] = i
		}
	}
	inWave := make([]int, len(d.msgs))
	pending := make([]int, len(d.msgs))
	for i := range pending {
		pending[i] = i
	}
	var deadline *time.Timer
	for len(pending) > 0 {
		over := ctx.Err() != nil || !time.Now().Before(d.deadline)
		var wave, follows, waiting, released []int
		var waitFor []*keychain.Link
		join := func(i, after int) {
			wave, follows = append(wave, i), append(follows, after)
			inWave[i] = len(wave)
		}
		for _, i := range pending {
			t := d.tags[i]
			if !t.keyed {
				join(i, -1)
				continue
			}
			before := chains.State(t.prev)
			p, here := rowOf[t.prev]
			switch {
			case before == keychain.Stopped || chains.State(t.self) == keychain.Stopped || over:
				released = append(released, i)
			case before == keychain.Passed:
				join(i, -1)
			case here && inWave[p] > 0:
				join(i, inWave[p]-1)
			default:
				waiting, waitFor = append(waiting, i), append(waitFor, t.prev)
			}
		}
		for _, i := range wave {
			inWave[i] = 0
		}
		// Released in one settle; each stops its own link, and so the
		// rows behind it.
		waves.releaseRows(released, 0)
		pending = waiting
		if len(wave) > 0 {
			pending = append(pending, waves.sendWave(ctx, wave, follows, order)...)
			slices.Sort(pending)
			continue
		}
		if len(pending) == 0 {
			break
		}
		if deadline == nil {
			deadline = time.NewTimer(time.Until(d.deadline))
			defer deadline.Stop()
		}
		select {
		case <-chains.Wait(waitFor):
		case <-ctx.Done():
		case <-deadline.C:
		}
	}
}

// sendWave sends one wave of deliverInKeyOrder and returns the rows to
// look at again: those left unsent behind a row that was not delivered
// (what becomes of them depends on what became of it), and those the sink
// did not attempt for its own reasons (againOrRelease).
func (d *sinkDelivery) sendWave(ctx context.Context, wave, follows []int, order keyOrder) (again []int) {
	sent := d.sendWithin(ctx, wave, follows)
	own := declined{unavailable: sent.unavailable}
	for _, i := range sent.rows {
		if order.skipped[i] {
			order.skipped[i] = false
			again = append(again, i)
		} else {
			own.rows = append(own.rows, i)
		}
	}
	return append(again, d.againOrRelease(ctx, own)...)
}

// keyOrder is the observer of deliverInKeyOrder's waves: it resolves each
// row's link with its outcome, releases included (a row the sink did not
// attempt is not resolved: it is sent again or released).
type keyOrder struct {
	chains *keychain.Chains
	tags   []claimTag
	// skipped marks the rows left unsent behind a row that was not
	// delivered (errFollowsFailed), until sendWave has read them.
	skipped []bool
}

func (k keyOrder) observe(s *sent) {
	if s.notAttempted {
		k.skipped[s.i] = followsFailed(s.err)
		return
	}
	k.chains.Resolve(k.tags[s.i].self, passesKey(s.outcome.kind))
}

func (k keyOrder) done() {}
