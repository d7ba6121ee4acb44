package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// waitingOnLocks counts, for each of schemas, the relay's backends
// (application_name outbox-relay) whose statement on it waits on a lock.
func waitingOnLocks(t *testing.T, db *dbtest.Schema, schemas []*dbtest.Schema) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
SELECT query FROM pg_catalog.pg_stat_activity
 WHERE application_name = 'outbox-relay' AND datname = current_database() AND wait_event_type = 'Lock'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			t.Fatal(err)
		}
		for _, s := range schemas {
			if strings.Contains(q, `"`+s.Name+`".`) {
				out[s.Name]++
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestProcess_PoolShare_LockedOutboxesLeaveConnectionsToTheOthers: one
// relay serves ten schemas through RELAY_SCHEMA_MATCH, on one pool of 18
// connections. Another session locks the messages tables of eight of them
// (LOCK TABLE … IN ACCESS EXCLUSIVE MODE) and holds the locks while rows
// trickle into one that is not locked: each is delivered while the locks
// are held, and no locked outbox ties up more than its share of the pool
// (two connections, with ten outboxes) in statements waiting on its lock.
// Before the bound, the locked outboxes' claims, gauges and claim floors
// took every connection, and the unlocked outbox delivered nothing until
// the locks went.
func TestProcess_PoolShare_LockedOutboxesLeaveConnectionsToTheOthers(t *testing.T) {
	t.Parallel()
	const outboxes, locked, share = 10, 8, 2
	base := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "S", "s.>")
	var schemas []*dbtest.Schema
	for i := range outboxes {
		s := siblingSchema(t, base, fmt.Sprintf("p%d", i), true)
		relaytest.InsertRows(t, s, 1, "s.seed")
		schemas = append(schemas, s)
	}
	startProcess(t, "DATABASE_URL="+base.URL, "RELAY_SCHEMA_MATCH="+likeEscape(base.Name+"_p")+"%", "RELAY_DISCOVER_INTERVAL=1s", "NATS_URL="+srv.URL())
	for _, s := range schemas {
		relaytest.WaitDrained(t, s, relaytest.Budget(1))
	}

	ctx := context.Background()
	tx, err := base.Conn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range schemas[:locked] {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+s.Table("messages")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
	}

	// Rows trickle into the unlocked outbox until every locked one has
	// used its share of the pool, and ten more after that.
	free := schemas[outboxes-1]
	var worst time.Duration
	saturatedAt, trickled := -1, 0
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; saturatedAt < 0 || i < saturatedAt+10; i++ {
		if saturatedAt < 0 && time.Now().After(deadline) {
			t.Fatalf("after %d trickle rows, the locked outboxes wait with %v connections, not %d each", i, waitingOnLocks(t, base, schemas[:locked]), share)
		}
		inserted := time.Now()
		if err := insertNumbered(t, free, "s.trickle", i, i+1); err != nil {
			t.Fatal(err)
		}
		waitfor.Condition(t, 30*time.Second, fmt.Sprintf("trickle row %d of the unlocked outbox to be delivered while %d others are locked", i, locked), func() bool {
			return free.Count(t, "messages_all") == 0
		})
		trickled++
		took := time.Since(inserted)
		worst = max(worst, took)
		waiting := waitingOnLocks(t, base, schemas[:locked])
		full := 0
		for _, s := range schemas[:locked] {
			if n := waiting[s.Name]; n > share {
				t.Fatalf("locked outbox %s ties up %d connections of the pool in statements waiting on its lock, want at most %d", s.Name, n, share)
			} else if n == share {
				full++
			}
		}
		if full == locked && saturatedAt < 0 {
			saturatedAt = i
			t.Logf("every locked outbox waits with its share of the pool after %d trickle rows", i+1)
		}
	}
	if got := free.CountWhere(t, "archive", "topic = 's.trickle'"); got != trickled {
		t.Errorf("the unlocked outbox archived %d trickle rows, want %d", got, trickled)
	}
	t.Logf("worst delivery of a trickle row while %d of %d outboxes were locked: %s", locked, outboxes, worst)
	if worst > 5*time.Second { // under 100 ms here; 11 s to 12 s before the bound
		t.Errorf("a trickle row took %s to be delivered while %d of %d outboxes were locked", worst, locked, outboxes)
	}
}
