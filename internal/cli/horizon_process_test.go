package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// In every mode, two relay processes deliver while a session pins the
// horizon, beside writers that hold their transactions open across the
// claim floor's refreshes and commit late, and one that stays open for
// seconds after the floor passed its rows: every row arrives once, and the
// relays report the floor and what one claim walked.
func TestProcess_PinnedHorizonLateWritersLoseNothing(t *testing.T) {
	for _, mode := range []string{"unordered", "ordered", "partitioned"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dbtest.Exclusive(t, "many relays, many events")
			db := dbtest.New(t)
			srv := natstest.Start(t)
			srv.CreateStream(t, "EVENTS", "events.>")
			ctx := context.Background()
			// The schema is in the mode already: a switch waits for the
			// writers below, which hold their transactions open.
			db.SetMode(t, outbox.Mode(mode))

			pin := db.Conn(t)
			pinTx, err := pin.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = pinTx.Rollback(ctx) }()
			if _, err := pinTx.Exec(ctx, "SELECT count(*) FROM "+db.Table("messages")); err != nil {
				t.Fatal(err)
			}

			var relays []*process
			for _, id := range []string{"relay-a", "relay-b"} {
				relays = append(relays, startProcess(t, relayEnv(db, srv, "RELAY_MODE="+mode, "RELAY_ID="+id)...))
			}

			insert := func(tx pgx.Tx, who string, i int) {
				// Keys of their own: a row waiting behind an older row of its
				// key holds the floor back (it is due and unclaimed), which
				// this test is not about.
				var key any
				if i%3 == 0 {
					key = fmt.Sprintf("%s-%d", who, i)
				}
				if _, err := tx.Exec(ctx, "INSERT INTO "+db.Table("messages")+" (topic, payload, key) VALUES ($1, $2, $3)",
					"events."+who, fmt.Sprintf("%s %d", who, i), key); err != nil {
					t.Error(err)
				}
			}
			long := db.Conn(t)
			longTx, err := long.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				insert(longTx, "long", i)
			}

			const steady, late = 2000, 40
			var wg sync.WaitGroup
			for p := range 2 { // two producers, a row per transaction
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := p; i < steady; i += 2 {
						tx, err := db.Pool.Begin(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						insert(tx, "steady", i)
						if err := tx.Commit(ctx); err != nil {
							t.Error(err)
						}
						time.Sleep(3 * time.Millisecond)
					}
				}()
			}
			for w := range late {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(w) * 100 * time.Millisecond)
					tx, err := db.Pool.Begin(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					insert(tx, "late", w)
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Millisecond)
					if err := tx.Commit(ctx); err != nil {
						t.Error(err)
					}
				}()
			}
			time.Sleep(2 * time.Second)
			waitfor.Condition(t, 15*time.Second, "a relay's floor to pass the long writer's rows", func() bool {
				for _, p := range relays {
					lag := metricValue(p.metrics(), "outbox_relay_claim_floor_lag_seconds")
					if lag > 0 && lag < 1 {
						return true
					}
				}
				return false
			})
			time.Sleep(time.Second)
			if err := longTx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			want := steady + late + 10
			relaytest.WaitDrained(t, db, relaytest.Budget(want))
			relaytest.AssertStreamMatchesArchive(t, db, srv, "EVENTS", want)
			measured := 0.0
			for _, p := range relays {
				measured += metricValue(p.metrics(), "outbox_relay_claim_index_entries_count")
			}
			if measured == 0 {
				t.Error("no relay measured a claim (outbox_relay_claim_index_entries_count)")
			}
		})
	}
}
