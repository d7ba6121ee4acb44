package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// sum adds up the num_messages of records.
func sum(recs []map[string]any) int {
	n := 0
	for _, r := range recs {
		f, _ := r["num_messages"].(float64)
		n += int(f)
	}
	return n
}

// Rows failing alike in many small claims make a line a second, not a line
// a claim: the log stays readable when a whole backlog fails, and each line
// says how many rows, which ids, the destination and why.
func TestRelay_FailuresAreLoggedTogetherWhateverTheBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	var logs *testlog.Buffer
	cfg.Logger, logs = testlog.NewJSON(t, slog.LevelInfo)
	cfg.BatchSize, cfg.MaxInFlight = 5, 5
	cfg.BackoffMin, cfg.BackoffMax = time.Minute, time.Minute
	cfg.Sinks = map[string]sinks.Sink{"nats": &sinktest.Func{DeliverFunc: func(ctx context.Context, msgs []sinks.Message) []error {
		return sinks.Fill(make([]error, len(msgs)), errors.New("receiver in maintenance"))
	}}}
	b.db.Exec(t, `INSERT INTO %s.messages (topic, payload, destination)
SELECT 'orders.created', '\x01', CASE WHEN i <= 50 THEN 'nowhere' END FROM generate_series(1, 100) AS i`)
	relaytest.Start(t, b.db.Pool, cfg)

	waitfor.Condition(t, relaytest.Budget(100), "100 rows logged", func() bool {
		return sum(logs.Records("dead-lettered without sending")) == 50 && sum(logs.Records("delivery failed; retrying")) == 50
	})
	dead, retried := logs.Records("dead-lettered without sending"), logs.Records("delivery failed; retrying")
	// Twenty claims of five rows each; they are logged within a few seconds.
	if len(dead) > 4 || len(retried) > 4 {
		t.Errorf("%d lines for 50 unsent dead letters and %d for 50 retries, in claims of 5: want a line a second, not one a claim",
			len(dead), len(retried))
	}
	for _, r := range dead {
		if r["reason"] != "no_sink" || !strings.Contains(r["err"].(string), `destination "nowhere" is not a configured sink`) {
			t.Errorf("dead-letter line %v: want reason no_sink and the error naming the destination", r)
		}
	}
	for _, r := range retried {
		if r["topics"] != "orders.created" || r["err"] != "receiver in maintenance" || r["outbox_ids"] == "" || r["retry_in"] == "" {
			t.Errorf("retry line %v: want the topic, the error, the ids and the delay", r)
		}
	}
}
