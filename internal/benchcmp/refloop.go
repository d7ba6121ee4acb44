package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"

	"github.com/outbox-relay/outbox-relay/internal/bench"
)

// refloopWorkers is the number of refloop workers that stands for the
// relays of o: two per relay, as each relay runs two claim loops. Its
// workers share one process, one pool and one NATS connection.
func refloopWorkers(o bench.Options) int {
	return 2 * max(o.Replicas, 1)
}

// runRefloop runs the reference loop with the parameters of o: batches of
// 1000 and refloopWorkers workers (two for one relay, as its README
// measures it), every row due at once with o.Burst (its -burst).
func runRefloop(ctx context.Context, bin string, o bench.Options) (bench.Result, error) {
	args := []string{
		"-n", strconv.Itoa(o.N), "-payload", strconv.Itoa(o.PayloadBytes),
		"-batch", "1000", "-workers", strconv.Itoa(refloopWorkers(o)), "-mode", o.Mode,
		"-producers", strconv.Itoa(max(o.Producers, 1)), "-producer-batch", strconv.Itoa(max(o.RowsPerTx, 1)),
		"-dsn", o.DatabaseURL, "-nats", o.NatsURL,
	}
	if o.Mode == "steady" {
		args = append(args, "-rate", strconv.FormatFloat(o.Rate, 'f', -1, 64))
	}
	if o.Burst {
		args = append(args, "-burst")
	}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		return bench.Result{}, fmt.Errorf("%w: %s", err, out)
	}
	var r bench.Result
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return bench.Result{}, fmt.Errorf("parse %q: %w", out, err)
	}
	return r, nil
}
