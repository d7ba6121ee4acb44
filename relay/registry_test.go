package relay_test

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
)

// The relays record their claim floor's lag at each heartbeat, so that
// status and the console, which have no Prometheus, can say it.
func TestRelay_HeartbeatRecordsTheClaimFloorLag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	relaytest.Start(t, b.db.Pool, b.config(t))
	relaytest.InsertRows(t, b.db, 3, "events.a")
	// The first heartbeat (at registration) precedes the floor's first
	// refresh; the next, 10 s later, records it.
	relaytest.WaitFor(t, b.db, "SELECT count(*) = 1 FROM %s.relays WHERE claim_floor_lag >= 0 AND claim_floor_lag < 60")
}
