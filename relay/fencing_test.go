package relay

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// A release whose commit answer was lost is retried; by then another relay
// may have claimed the row at the same attempt number (a release gives the
// attempt back). The retried release must not end that relay's lease.
func TestSettle_ARetriedReleaseCannotEndANewerLease(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	newRelay := func(id string) *Relay {
		r, err := New(db.Pool, Config{
			Schema: db.Name, ID: id, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := newRelay("relay-a"), newRelay("relay-b")
	all := claimRequest{limit: 10, bytes: 1 << 30, oversized: true, closed: []string{}}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('t', 'x')`)

	claimedByA, err := a.mode.claimers()[0].claim(ctx, all)
	if err != nil || len(claimedByA) != 1 {
		t.Fatalf("relay A claimed %d rows, %v", len(claimedByA), err)
	}
	release := []rowOutcome{{id: claimedByA[0].ID, seq: claimedByA[0].seq, attempt: claimedByA[0].Attempt, sink: "nats", kind: kindRelease}}
	if err := a.settler.settleBatch(ctx, release); err != nil {
		t.Fatal(err)
	}
	claimedByB, err := b.mode.claimers()[0].claim(ctx, all)
	if err != nil || len(claimedByB) != 1 {
		t.Fatalf("relay B claimed %d rows, %v", len(claimedByB), err)
	}
	if claimedByB[0].Attempt != claimedByA[0].Attempt {
		t.Fatalf("B's attempt %d, A's %d: the test needs them equal", claimedByB[0].Attempt, claimedByA[0].Attempt)
	}

	// A's release again, as settleWithRetry would after a lost answer.
	if err := a.settler.settleBatch(ctx, release); err != nil {
		t.Fatal(err)
	}
	var leasedBy string
	var leasedUntil time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT leased_by, leased_until FROM "+db.Table("messages")).Scan(&leasedBy, &leasedUntil); err != nil {
		t.Fatalf("relay B's lease was ended: %v", err)
	}
	if leasedBy != "relay-b" || time.Until(leasedUntil) < time.Second {
		t.Errorf("row leased by %q until %v, want relay B's lease intact", leasedBy, leasedUntil)
	}
}
