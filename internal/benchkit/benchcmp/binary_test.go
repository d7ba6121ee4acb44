package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
)

// A relay process that exits before the backlog drains (one that refuses
// to start: a schema newer than the binary, a configuration error) fails
// the run at once, rather than leave the benchmark waiting for a drain no
// relay makes. false stands for such a relay.
func TestRunBinary_ARelayThatExitsFailsTheRun(t *testing.T) {
	exits, err := exec.LookPath("false")
	if err != nil {
		t.Fatal(err)
	}
	db := dbtest.NewEmpty(t)
	nats := natstest.Start(t)
	o := bench.Options{DatabaseURL: dbtest.URL(), NatsURL: nats.URL(), Schema: db.Name, Mode: "backlog", N: 100, PayloadBytes: 64}
	for _, replicas := range []int{1, 2} {
		o.Replicas = replicas
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = runBinary(ctx, exits, o, 2*time.Second)
		waitedOut := ctx.Err() != nil
		cancel()
		if err == nil || !strings.Contains(err.Error(), "exited before the table drained") {
			t.Errorf("%d relays that exit at once: runBinary = %v, want an error saying a relay exited before the drain", replicas, err)
		}
		if waitedOut {
			t.Errorf("%d relays that exit at once: runBinary waited until its context ended", replicas)
		}
	}
}
