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
// claimTag.keyed) is sent once the row it follows has passed (delivered,
// or dead-lettered, which ends its hold on the key), whether that row is
// in d, in another delivery, or in an earlier batch still in flight. It
// sends in waves: each holds every row that may go (the rows without a key,
// and each key's next row), and the next one follows once the sink has
// answered for it, or, when nothing may go yet, once a link resolves. A
// key's next row thus goes out as soon as the previous one is
// acknowledged, and the settles follow behind, batched. When the row a
// keyed row follows was not delivered (to be retried, released, or unknown
// to this relay), the row is released without an attempt, and so the rest
// of its key behind it: the claim takes none of them again while that row
// is left. Rows still waiting at the deadline, or at shutdown, are
// released. d holds a key's rows in id order (the claim's order).
func deliverInKeyOrder(ctx context.Context, d *sinkDelivery, chains *keychain.Chains) {
	waves := *d
	waves.also = append(slices.Clip(d.also), keyOrder{chains: chains, tags: d.tags})
	pending := make([]int, len(d.msgs))
	for i := range pending {
		pending[i] = i
	}
	var deadline *time.Timer
	for len(pending) > 0 {
		over := ctx.Err() != nil || !time.Now().Before(d.deadline)
		var wave, waiting, released []int
		var waitFor []*keychain.Link
		for _, i := range pending {
			t := d.tags[i]
			if !t.keyed {
				wave = append(wave, i)
				continue
			}
			switch before := chains.State(t.prev); {
			case before == keychain.Stopped || chains.State(t.self) == keychain.Stopped || over:
				released = append(released, i)
			case before == keychain.Passed:
				wave = append(wave, i)
			default:
				waiting, waitFor = append(waiting, i), append(waitFor, t.prev)
			}
		}
		// Released in one settle; each stops its own link, and so the
		// rows behind it.
		waves.releaseRows(released, 0)
		pending = waiting
		if len(wave) > 0 {
			waves.sendEach(ctx, wave)
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

// keyOrder is the observer of deliverInKeyOrder's waves: it resolves each
// row's link with its outcome, releases included (a row the sink did not
// attempt is not resolved: it is sent again or released).
type keyOrder struct {
	chains *keychain.Chains
	tags   []claimTag
}

func (k keyOrder) observe(s *sent) {
	if s.notAttempted {
		return
	}
	k.chains.Resolve(k.tags[s.i].self, passesKey(s.outcome.kind))
}

func (k keyOrder) done() {}
