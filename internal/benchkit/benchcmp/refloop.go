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

// extraProcessCPU is the key, in a refloop run's Extra, of its process's
// CPU seconds (user and system, from exec to exit: setup and preload
// included) per 100k events.
const extraProcessCPU = "process_cpu_s_per_100k"

// runRefloop runs the reference loop with the parameters of o: batches of
// 1000 and refloopWorkers workers (two for one relay, as a relay runs two
// claim loops), every row due at once with o.Burst (its -burst).
func runRefloop(ctx context.Context, bin string, o bench.Options) (bench.Result, error) {
	return runRefloopWorkers(ctx, bin, o, refloopWorkers(o))
}

// runRefloopPreload runs the reference loop's backlog run without a
// worker: its setup, preload, ANALYZE and verification, and no drain. The
// PostgreSQL CPU of a run less that of this one is the drain's.
func runRefloopPreload(ctx context.Context, bin string, o bench.Options) (bench.Result, error) {
	return runRefloopWorkers(ctx, bin, o, 0)
}

// runRefloopWorkers runs the reference loop as runRefloop does, with
// workers workers.
func runRefloopWorkers(ctx context.Context, bin string, o bench.Options, workers int) (bench.Result, error) {
	args := []string{
		"-n", strconv.Itoa(o.N), "-payload", strconv.Itoa(o.PayloadBytes),
		"-batch", "1000", "-workers", strconv.Itoa(workers), "-mode", o.Mode,
		"-producers", strconv.Itoa(max(o.Producers, 1)), "-producer-batch", strconv.Itoa(max(o.RowsPerTx, 1)),
		"-dsn", o.DatabaseURL, "-nats", o.NatsURL,
	}
	if o.Mode == "steady" {
		args = append(args, "-rate", strconv.FormatFloat(o.Rate, 'f', -1, 64))
	}
	if o.Burst {
		args = append(args, "-burst")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.Output()
	if err != nil {
		return bench.Result{}, fmt.Errorf("%w: %s", err, out)
	}
	var r bench.Result
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return bench.Result{}, fmt.Errorf("parse %q: %w", out, err)
	}
	if r.Extra == nil {
		r.Extra = map[string]any{}
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.Extra[extraProcessCPU] = cpu.Seconds() * 100000 / float64(o.N)
	return r, nil
}
