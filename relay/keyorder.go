package relay

import (
	"context"
	"slices"
	"sync"
	"time"
)

// deliverInKeyOrder sends d keeping each key's order, for a mode whose
// claims take a key's rows together, oldest first (queryBucketsClaim, and
// queryHeadsClaim's runs): it sends in waves, the first holding every row
// without a key (a row whose key is ” has one: claimTag.keyed) and the
// oldest row of each key, each next one the following row of every key whose
// previous row was delivered (or dead-lettered, which ends its hold on the
// key). A key's next row thus goes out as soon as the previous one is
// acknowledged, and the settles follow behind, batched. When a row is to
// be retried, or is released, the key's later rows in the batch are
// released without an attempt: the claim takes none of them again while
// that row is left. d holds a key's rows in id order (the claim's order).
func deliverInKeyOrder(ctx context.Context, d *sinkDelivery) {
	queued := map[string][]int{}
	var wave []int
	for i := range d.msgs {
		if k := d.msgs[i].Key; !d.tags[i].keyed {
			wave = append(wave, i)
		} else if q, ok := queued[k]; ok {
			queued[k] = append(q, i)
		} else {
			queued[k] = []int{}
			wave = append(wave, i)
		}
	}
	order := &keyOrder{kinds: make([]outcomeKind, len(d.msgs))}
	waves := *d
	waves.also = append(slices.Clip(d.also), order)
	kinds, mu := order.kinds, &order.mu
	for len(wave) > 0 {
		for _, i := range wave {
			kinds[i] = kindRelease // until the sink reports
		}
		waves.sendEach(ctx, wave)
		var next, released []int
		mu.Lock()
		for _, i := range wave {
			k := d.msgs[i].Key
			q := queued[k]
			if !d.tags[i].keyed || len(q) == 0 {
				continue
			}
			switch {
			case ctx.Err() != nil || !time.Now().Before(d.deadline):
				released = append(released, q...)
			case kinds[i] == kindDelivered || kinds[i] == kindDead:
				next = append(next, q[0])
				queued[k] = q[1:]
				continue
			default:
				released = append(released, q...)
			}
			delete(queued, k)
		}
		mu.Unlock()
		slices.Sort(next)
		d.releaseRows(released, 0)
		wave = next
	}
}

// keyOrder is the observer of deliverInKeyOrder's waves: the kind of every
// outcome, by message index.
type keyOrder struct {
	mu    sync.Mutex
	kinds []outcomeKind
}

func (k *keyOrder) observe(s *sent) {
	if s.notAttempted {
		return
	}
	k.mu.Lock()
	k.kinds[s.i] = s.outcome.kind
	k.mu.Unlock()
}

func (k *keyOrder) done() {}
