package relay

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestLanesClaim_ParksALaneWhoseHeadIsHeldForARecheckOnly: a claim that
// finds a due lane whose head another claim holds leased parks the lane
// for laneRecheck, not to the end of that lease. A claim sees this when its
// snapshot was taken just before the head's settle committed: the settle
// made the lane due and removed the head, and a lane parked to the end of
// the lease held the key's next row for up to 30 s (commit-to-receipt p99
// of 26-30 s in ordered mode with 100 hot keys, make bench-pin-horizon
// PINFLAGS='-relay-mode ordered').
func TestLanesClaim_ParksALaneWhoseHeadIsHeldForARecheckOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModeOrdered)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('events.a', 'first', 'k'), ('events.a', 'second', 'k')`)
	db.Exec(t, `UPDATE %s.messages SET leased_by = 'other', leased_until = now() + interval '30 seconds', attempts = 1, claim_seq = 1
	             WHERE id = (SELECT min(id) FROM %s.messages)`)
	db.Exec(t, `UPDATE %s.lanes SET available_at = now()`)

	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModeOrdered, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := r.mode.(*ordered).claimHeads(ctx, claimRequest{limit: 10, bytes: 1 << 30, closed: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != 0 {
		t.Fatalf("the claim leased %d rows of key k while its head is held; want none", len(batch))
	}
	var parkedFor time.Duration
	if err := db.Pool.QueryRow(ctx, "SELECT available_at - now() FROM "+db.Table("lanes")+" WHERE key = 'k'").Scan(&parkedFor); err != nil {
		t.Fatal(err)
	}
	if parkedFor <= 0 || parkedFor > laneRecheck+time.Second {
		t.Errorf("the lane of k is parked for %s; want at most laneRecheck (%s), not the head's lease", parkedFor, laneRecheck)
	}
}
