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
// nothing; once the relay has seen the stream (its loops' first pauses,
// up to 4.8 s, are over), each row must be delivered within half the
// interval of its commit (a loop that waited the whole interval after an
// empty claim left rows waiting about 4 s). Rows without a key, in every
// mode: in ordered mode they have a loop of their own; partitioned mode's
// eager loop came first, and is here so that it stays.
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
			// The first rows may find the relay idle, or (partitioned)
			// without its buckets: they are not measured.
			const rows, unmeasured = 14, 6
			for range rows {
				b.db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('events.stream', 'x')`)
				time.Sleep(900 * time.Millisecond)
			}
			waitfor.Condition(t, 30*time.Second, "the stream's rows to be archived", func() bool {
				return b.db.Count(t, "archive") == rows
			})
			r, err := b.db.Pool.Query(context.Background(), `
SELECT id, extract(epoch FROM delivered_at - created_at)::float8
  FROM `+b.db.Table("archive")+` ORDER BY id OFFSET $1`, unmeasured)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			read := 0
			for r.Next() {
				read++
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
			if read != rows-unmeasured {
				t.Errorf("read %d of the stream's %d measured rows in the archive", read, rows-unmeasured)
			}
		})
	}
}
