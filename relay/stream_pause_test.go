package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// While rows keep coming, a claim that finds none looks again a tenth of
// RELAY_POLL_INTERVAL later, not a whole interval: a stream with lulls
// between its rows is not held up by them. Here the poll interval is 4 s
// and a row commits every 0.9 s, so the claims between two rows find
// nothing; each row must still be delivered within half the interval of
// its commit (a loop that waited the whole interval after an empty claim
// left rows waiting up to 3 s). Rows without a key, in every mode: in
// ordered mode they have a loop of their own.
func TestRelay_AStreamsLullsDoNotHoldItsRowsAPollInterval(t *testing.T) {
	t.Parallel()
	const poll = 4 * time.Second
	for _, mode := range []outbox.Mode{outbox.ModeUnordered, outbox.ModeOrdered, outbox.ModePartitioned} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config(t)
			cfg.Mode = mode
			cfg.PollInterval = poll
			relaytest.Start(t, b.db.Pool, cfg)
			// The first row finds the relay idle: it may wait a whole
			// interval (and, in partitioned mode, for the buckets).
			relaytest.InsertRows(t, b.db, 1, "events.first")
			relaytest.WaitDrained(t, b.db, 30*time.Second)
			const rows = 6
			for range rows {
				time.Sleep(900 * time.Millisecond)
				b.db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('events.stream', 'x')`)
			}
			waitfor.Condition(t, 30*time.Second, "the stream's rows to be archived", func() bool {
				return b.db.Count(t, "archive") == rows+1
			})
			r, err := b.db.Pool.Query(context.Background(), `
SELECT id, extract(epoch FROM delivered_at - created_at)::float8
  FROM `+b.db.Table("archive")+` WHERE topic = 'events.stream' ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for r.Next() {
				var id int64
				var waited float64
				if err := r.Scan(&id, &waited); err != nil {
					t.Fatal(err)
				}
				if time.Duration(waited*float64(time.Second)) > poll/2 {
					t.Errorf("row %d of the stream was delivered %.2fs after its commit, want within %s (half of RELAY_POLL_INTERVAL %s): an empty claim between its rows waited the whole interval",
						id, waited, poll/2, poll)
				}
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
