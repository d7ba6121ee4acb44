package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// With RELAY_NOTIFY a row is claimed as soon as it commits: here the poll
// interval is a minute, longer than the test waits, so only the
// notification can get the row delivered.
func TestRelay_NotifyWakesTheClaimersAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.Notify = true
	cfg.PollInterval = time.Minute
	relaytest.Start(t, b.db.Pool, cfg)
	// Inserts notify once the relay's heartbeat row asks for it, and reach
	// the relay once its LISTEN has run (its connection's last statement).
	relaytest.WaitFor(t, b.db, "SELECT count(*) = 1 FROM %s.relays WHERE notify")
	relaytest.WaitFor(t, b.db, fmt.Sprintf(
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN %s'",
		pgx.Identifier{relay.NotifyChannel(b.db.Name)}.Sanitize()))
	relaytest.InsertRows(t, b.db, 3, "events.a")
	relaytest.WaitDrained(t, b.db, 20*time.Second)
}
