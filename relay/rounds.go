package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// errFollowsFailed is the outcome of a message left unsent because the
// message it follows in the same send was not delivered: it is not
// attempted, and what becomes of it depends on what becomes of that one
// (deliverInKeyOrder).
var errFollowsFailed = fmt.Errorf("%w: not sent: the row before it in its key was not delivered", sinks.ErrNotAttempted)

// sendInRounds sends msgs through send a round at a time, so that several
// rows of one key travel in one delivery and still reach the destination
// in order, whatever the sink: first every message that follows none
// (follows[j] < 0), then those that follow a message the sink reported
// delivered in the round before, and so on. A message whose predecessor was
// not delivered is not sent, nor anything behind it: report gets
// errFollowsFailed for each, after its predecessor's outcome. Once ctx has
// ended (the delivery's deadline), no further round is sent: its messages
// and those behind them get errFollowsFailed too, and the caller releases
// them. With follows nil, every message goes in one round.
//
// Each round waits for the sink's every outcome, one round trip; what it
// saves over sending each round as a delivery of its own is the rest of a
// delivery's cost: its observers, its settle, and the claim loop's wait.
func sendInRounds(ctx context.Context, msgs []sinks.Message, follows []int, send func(msgs []sinks.Message, report func(k int, err error)), report func(j int, err error)) {
	if follows == nil {
		send(msgs, report)
		return
	}
	behind := make(map[int][]int)
	var round []int
	for j, p := range follows {
		if p < 0 {
			round = append(round, j)
		} else {
			behind[p] = append(behind[p], j)
		}
	}
	var skip func(js []int)
	skip = func(js []int) {
		for _, j := range js {
			report(j, errFollowsFailed)
			skip(behind[j])
		}
	}
	for first := true; len(round) > 0; first = false {
		if !first && ctx.Err() != nil {
			skip(round)
			return
		}
		this := round
		sub := make([]sinks.Message, len(this))
		for k, j := range this {
			sub[k] = msgs[j]
		}
		var mu sync.Mutex
		delivered := make([]bool, len(this))
		send(sub, func(k int, err error) {
			mu.Lock()
			delivered[k] = err == nil
			mu.Unlock()
			report(this[k], err)
		})
		var next []int
		for k, j := range this {
			if delivered[k] {
				next = append(next, behind[j]...)
			} else {
				skip(behind[j])
			}
		}
		round = next
	}
}

// followsFailed reports whether err is errFollowsFailed.
func followsFailed(err error) bool {
	return errors.Is(err, errFollowsFailed)
}
