package relay

import (
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
)

// livenessFloor is the shortest liveness threshold.
const livenessFloor = 2 * time.Minute

// livenessThreshold is how long one of the relay's loops may work without
// coming round before the relay is not live: three leases, and at least
// livenessFloor. Every call a loop makes between two turns is bounded well
// within it: a claim by a quarter of the lease (claimLoops.run), a settle and
// its retries by the lease (settler.withRetry), a heartbeat by
// heartbeatTimeout, a round of the bucket owner by three renewals (at most
// 3 s); the pauses between turns are waits, which never count.
func livenessThreshold(lease time.Duration) time.Duration {
	return max(3*lease, livenessFloor)
}

// newLiveness returns the monitor of a relay's loops, with threshold,
// which logs each stall as it begins and ends to log.
func newLiveness(log *slog.Logger, threshold time.Duration) *liveness.Monitor {
	return liveness.New(liveness.Config{
		Threshold: threshold,
		Hooks: liveness.Hooks{
			Stuck: func(loop string, stuckFor time.Duration) {
				log.Error("a loop of the relay is stuck: a call that never returns, or a deadlock; /livez fails, so that the orchestrator restarts the relay",
					"loop", loop, "stuck_for", stuckFor.Round(time.Second), "limit", threshold)
			},
			Recovered: func(loop string, stuckFor time.Duration) {
				log.Warn("a loop of the relay that was stuck comes round again", "loop", loop, "stuck_for", stuckFor.Round(time.Second))
			},
		},
	})
}
