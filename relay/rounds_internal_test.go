package relay

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// sendInRounds sends a message only after the one it follows was reported
// delivered, in a later round, and skips everything behind a failure.
func TestSendInRounds_FollowersGoInLaterRoundsAndStopBehindAFailure(t *testing.T) {
	msgs := make([]sinks.Message, 7)
	for i := range msgs {
		msgs[i].ID = int64(i)
	}
	// Two chains, 0 → 2 → 4 → 6 and 1 → 3 → 5; 3 fails.
	follows := []int{-1, -1, 0, 1, 2, 3, 4}
	var rounds [][]int64
	send := func(sub []sinks.Message, report func(k int, err error)) {
		var ids []int64
		for k, m := range sub {
			ids = append(ids, m.ID)
			var err error
			if m.ID == 3 {
				err = errors.New("down")
			}
			report(k, err)
		}
		rounds = append(rounds, ids)
	}
	outcomes := map[int]error{}
	var order []int
	sendInRounds(context.Background(), msgs, follows, send, func(j int, err error) {
		if _, twice := outcomes[j]; twice {
			t.Errorf("message %d reported twice", j)
		}
		outcomes[j] = err
		order = append(order, j)
	})
	want := [][]int64{{0, 1}, {2, 3}, {4}, {6}}
	if !slices.EqualFunc(rounds, want, slices.Equal) {
		t.Errorf("rounds %v, want %v", rounds, want)
	}
	if len(outcomes) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(outcomes), len(msgs))
	}
	if !followsFailed(outcomes[5]) || !errors.Is(outcomes[5], sinks.ErrNotAttempted) {
		t.Errorf("message 5, behind the failed 3: %v, want not attempted", outcomes[5])
	}
	if slices.Index(order, 5) < slices.Index(order, 3) {
		t.Errorf("reported in the order %v: 5 before the failure it follows", order)
	}
	for _, j := range []int{0, 1, 2, 4, 6} {
		if outcomes[j] != nil {
			t.Errorf("message %d: %v, want delivered", j, outcomes[j])
		}
	}
}

// Once the delivery's deadline has passed, no further round goes: what is
// left is reported not sent, for the caller to release.
func TestSendInRounds_NoRoundAfterTheDeadline(t *testing.T) {
	msgs := make([]sinks.Message, 4)
	for i := range msgs {
		msgs[i].ID = int64(i)
	}
	follows := []int{-1, 0, 1, 2} // one key's four rows
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := 0
	send := func(sub []sinks.Message, report func(k int, err error)) {
		sent += len(sub)
		cancel() // the deadline passes during the first round
		for k := range sub {
			report(k, nil)
		}
	}
	var skipped []int
	sendInRounds(ctx, msgs, follows, send, func(j int, err error) {
		if followsFailed(err) {
			skipped = append(skipped, j)
		}
	})
	if sent != 1 || !slices.Equal(skipped, []int{1, 2, 3}) {
		t.Errorf("sent %d, skipped %v: want the first row sent and the rest left unsent", sent, skipped)
	}
}
