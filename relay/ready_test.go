package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// Many clients polling readiness at once ping the database once per
// second, not once per request.
func TestReady_ManyChecksPingTheDatabaseOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.db.NewPool(t, "ready-cache")
	r, _ := relaytest.Start(t, pool, b.config(t))
	waitfor.Condition(t, 10*time.Second, "the relay to be ready", func() bool { return r.Ready(context.Background()) == nil })

	before := pool.Stat().AcquireCount()
	const clients, checks = 16, 50
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range checks {
				if err := r.Ready(context.Background()); err != nil {
					t.Errorf("not ready: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The claims and the heartbeat use the pool too, a few times a second.
	if n := pool.Stat().AcquireCount() - before; n > 40 {
		t.Errorf("%d readiness checks acquired %d connections, want a few", clients*checks, n)
	}
}
