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

// The binary's drain is timed by polling the table until it is empty.
// That poll is the benchmark's load on PostgreSQL, not the relay's:
// untilDrained reports what its backend used, so that runBinary leaves it
// out of the relay's PostgreSQL CPU (refloop times itself and polls
// nothing).
func TestUntilDrained_ReportsWhatItsPollCost(t *testing.T) {
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('t', '\x00')`)
	began := time.Now()
	// Four seconds of polls every 5 ms, about 800 statements and some
	// 80 ms of a backend's CPU, which /proc counts in 10 ms ticks: enough
	// that none counted is not luck.
	const hold = 4 * time.Second
	go func() {
		time.Sleep(hold)
		db.Exec(t, `DELETE FROM %s.messages`)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	elapsed, poll, err := untilDrained(ctx, db.Pool, bench.Options{Schema: db.Name}, began)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed < hold {
		t.Errorf("drained after %s, before the row was deleted (%s)", elapsed, hold)
	}
	t.Logf("poll CPU %s over %s", poll, elapsed)
	if poll < 0 || poll >= elapsed {
		t.Errorf("the poll's backend used %s of CPU over %s: want less than the whole", poll, elapsed)
	}
	// Only a server on this machine has its backends' CPU in /proc (a
	// server in a container has other process ids): there the poll must
	// have cost some.
	if _, err := bench.NewPostgresCPU(ctx, db.Pool); err == nil && poll == 0 {
		t.Errorf("the poll's backend used no CPU over %s of polls on a server of this machine", elapsed)
	} else if err != nil {
		t.Logf("PostgreSQL's CPU is not read here (%v): the poll's is not checked", err)
	}
}
