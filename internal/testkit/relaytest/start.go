package relaytest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay"
)

// stopWithin is how long a relay may take to return from Run once
// cancelled: its drain (DrainTimeout, seconds in the tests) and its final
// settles, with room for a loaded machine.
const stopWithin = 60 * time.Second

// Start builds a relay over pool with cfg, failing t if cfg is refused,
// and runs it until stop is called or the test ends. See Run.
func Start(t testing.TB, pool *pgxpool.Pool, cfg relay.Config) (r *relay.Relay, stop func()) {
	t.Helper()
	r, err := relay.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, Run(t, r)
}

// Run runs r, for a test that sets something on r between relay.New and
// Run, until stop is called or the test ends. stop cancels Run and waits
// for it to return, failing t unless it returns nil within a minute; it may
// be called more than once, from any goroutine, and a relay that refused
// to start is reported there too.
func Run(t testing.TB, r *relay.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("relay: Run returned %v", err)
				}
			case <-time.After(stopWithin):
				t.Errorf("relay: Run did not return within %s of cancel", stopWithin)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
