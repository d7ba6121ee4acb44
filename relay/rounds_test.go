package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// A batch holds many rows of each key: they go to the sink in one
// delivery, a round trip for each row of a key (sendInRounds). A row that fails stops the rest of
// its key without their being sent, and they follow it once it is
// delivered; a row dead-lettered lets the rest of its key go on.
func TestRelay_KeyedModesSendAKeysRowsInRoundsAndStopBehindAFailure(t *testing.T) {
	t.Parallel()
	for _, mode := range []outbox.Mode{outbox.ModeOrdered, outbox.ModePartitioned} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var mu sync.Mutex
			accepted := map[string][]string{} // key → payloads, in the order the sink took them
			failedOnce := false
			sink := &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
				errs := make([]error, len(msgs))
				mu.Lock()
				defer mu.Unlock()
				for i, m := range msgs {
					switch p := string(m.Payload); {
					case p == "k-05" && !failedOnce:
						failedOnce = true
						errs[i] = errors.New("the receiver is down for a moment")
					case p == "j-10":
						errs[i] = sinks.Permanent(errors.New("the receiver refuses this one"))
					default:
						accepted[m.Key] = append(accepted[m.Key], p)
					}
				}
				return errs
			}}
			cfg := b.config(t)
			cfg.Sinks = map[string]sinks.Sink{"nats": sink}
			cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, 50*time.Millisecond
			cfg.Mode = mode
			// Written before the relay starts: the first claim holds every
			// row of both keys, interleaved.
			b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, key)
			              SELECT 'events.x', convert_to(k || '-' || lpad(i::text, 2, '0'), 'UTF8'), k
			                FROM generate_series(1, 30) AS i, unnest(ARRAY['k', 'j']) AS k ORDER BY i, k`)
			relaytest.Start(t, b.db.Pool, cfg)
			waitfor.Condition(t, 30*time.Second, "every row to be archived or dead", func() bool {
				return b.db.Count(t, "messages_all") == 0
			})

			mu.Lock()
			defer mu.Unlock()
			for _, key := range []string{"k", "j"} {
				var want []string
				for i := 1; i <= 30; i++ {
					if p := fmt.Sprintf("%s-%02d", key, i); p != "j-10" {
						want = append(want, p)
					}
				}
				if got := accepted[key]; !slices.Equal(got, want) {
					t.Errorf("key %s reached the sink as %s,\nwant each row once, in insert order: %s", key, strings.Join(got, " "), strings.Join(want, " "))
				}
			}
			// The rows behind k-05 were not sent while it failed: their
			// one attempt is the one that delivered them.
			rows, err := b.db.Pool.Query(t.Context(), "SELECT convert_from(payload, 'UTF8'), attempts FROM "+b.db.Table("archive")+" WHERE key = 'k' AND attempts <> 1 ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			type attempted struct {
				Payload  string
				Attempts int
			}
			again, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attempted])
			if err != nil {
				t.Fatal(err)
			}
			if len(again) != 1 || again[0] != (attempted{"k-05", 2}) {
				t.Errorf("archived rows of k with other than one attempt: %v, want only k-05 with 2", again)
			}
			if n := b.db.Count(t, "dead_letters"); n != 1 {
				t.Errorf("%d dead rows, want 1 (j-10)", n)
			}
		})
	}
}
