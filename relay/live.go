package relay

import (
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
)

// livenessFloor is the shortest liveness threshold.
const livenessFloor = 2 * time.Minute

// livenessThreshold is how long one of the relay's loops may work without
// coming round before the relay is not live: three leases, and at least
// livenessFloor. Every call a loop makes between two turns is bounded well
// within it: a claim by a quarter of the lease (claimLoop), a settle and
// its retries by the lease (settleWithRetry), a heartbeat by
// heartbeatTimeout, a round of the bucket owner by three renewals (at most
// 3 s); the pauses between turns are waits, which never count.
func livenessThreshold(lease time.Duration) time.Duration {
	return max(3*lease, livenessFloor)
}

// newLiveness returns the monitor of r's loops, with threshold, which logs
// each stall as it begins and ends.
func newLiveness(r *Relay, threshold time.Duration) *liveness.Monitor {
	return liveness.New(liveness.Config{
		Threshold: threshold,
		Hooks: liveness.Hooks{
			Stuck: func(loop string, stuckFor time.Duration) {
				r.log.Error("a loop of the relay is stuck: a call that never returns, or a deadlock; /livez fails, so that the orchestrator restarts the relay",
					"loop", loop, "stuck_for", stuckFor.Round(time.Second), "limit", threshold)
			},
			Recovered: func(loop string, stuckFor time.Duration) {
				r.log.Warn("a loop of the relay that was stuck comes round again", "loop", loop, "stuck_for", stuckFor.Round(time.Second))
			},
		},
	})
}

// Live reports whether the relay's engine still turns: nil while each of
// its claim loops, its settle loops, its heartbeat and (in partitioned
// mode) its bucket owner either waits or came round within the liveness
// threshold (three leases, at least two minutes), else an error naming
// the loops that are stuck. A relay that is merely waiting (for its
// database, for a sink, for rows, for its deliveries to drain at
// shutdown) is live: it recovers by itself, and a restart would not help.
// Ready says whether it can work; Live whether only a restart can make it
// work again.
func (r *Relay) Live() error {
	if err := r.live.Check(); err != nil {
		return fmt.Errorf("the relay no longer turns: %w", err)
	}
	return nil
}
