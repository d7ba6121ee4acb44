package relay

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// deliverInKeyOrder, in partitioned mode, delivers a claimed batch for sink
// name keeping each key's order: it sends in waves, the first holding every
// row without a key and the oldest row of each key, each next one the
// following row of every key whose previous row was delivered (or
// dead-lettered, which ends its hold on the key, as in ordered mode). A
// key's next row thus goes out as soon as the previous one is acknowledged,
// and the settles follow behind, batched. When a row is to be retried, or
// is released, the key's later rows in the batch are released without an
// attempt: the claim takes none of them again while that row is left
// (queryBucketsClaim). The batch holds a key's rows in id order (the
// claim's order).
func (r *Relay) deliverInKeyOrder(ctx context.Context, name string, msgs []sinks.Message, tags []claimTag, deadline time.Time) {
	queued := map[string][]int{}
	var wave []int
	for i := range msgs {
		if k := msgs[i].Key; k == "" {
			wave = append(wave, i)
		} else if q, ok := queued[k]; ok {
			queued[k] = append(q, i)
		} else {
			queued[k] = []int{}
			wave = append(wave, i)
		}
	}
	var mu sync.Mutex
	kinds := make([]outcomeKind, len(msgs))
	observe := func(i int, k outcomeKind) {
		mu.Lock()
		kinds[i] = k
		mu.Unlock()
	}
	for len(wave) > 0 {
		for _, i := range wave {
			kinds[i] = kindRelease // until the sink reports
		}
		r.deliverEach(ctx, name, msgs, tags, wave, deadline, observe)
		var next, released []int
		mu.Lock()
		for _, i := range wave {
			k := msgs[i].Key
			q := queued[k]
			if k == "" || len(q) == 0 {
				continue
			}
			switch {
			case ctx.Err() != nil || !time.Now().Before(deadline):
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
		r.release(ctx, name, msgs, tags, released, 0, nil)
		wave = next
	}
}
