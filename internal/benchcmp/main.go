// Command benchcmp runs outbox-relay's benchmark and ../shared/refloop, the
// workshop's minimal relay loop, alternately on the same database and NATS
// server, and prints each round and the median ratio. It is a developer
// tool (make bench), not part of the shipped binary:
//
//	DATABASE_URL=… NATS_URL=… go run ./internal/benchcmp -refloop bin/refloop -rounds 5
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/relay"
)

func main() {
	refloop := flag.String("refloop", "bin/refloop", "path of the refloop binary (built from ../shared/refloop)")
	rounds := flag.Int("rounds", 5, "rounds of each")
	mode := flag.String("mode", "backlog", "backlog | steady")
	n := flag.Int("n", 100000, "number of events")
	payload := flag.Int("payload", 256, "payload size in bytes")
	rate := flag.Float64("rate", 2000, "steady mode: producer events per second")
	schema := flag.String("schema", "outbox_bench", "scratch schema")
	notify := flag.Bool("notify", false, "run the relay with RELAY_NOTIFY=true")
	producers := flag.Int("producers", 2, "steady mode: producer connections")
	rowsPerTx := flag.Int("rows-per-tx", 1, "steady mode: rows per producer transaction")
	archived := flag.Int("archived", 0, "fill the archive with this many rows of history first (compared with the relay on an empty archive, not refloop)")
	binary := flag.String("binary", "", "backlog mode: measure this outbox-relay binary, run with its defaults, from exec until the table is empty (instead of the in-process benchmark)")
	chosenKeys := flag.Bool("chosen-keys", false, "give every row an idempotency key of the producer's choosing (looked up and recorded)")
	notDue := flag.Int("not-due", 0, "add this many rows due in a day (compared with the relay without them, not refloop)")
	flag.Parse()
	o := bench.Options{
		DatabaseURL: os.Getenv("DATABASE_URL"), NatsURL: os.Getenv("NATS_URL"), Schema: *schema,
		Mode: *mode, N: *n, PayloadBytes: *payload, Rate: *rate, Timeout: 10 * time.Minute,
		Producers: *producers, RowsPerTx: *rowsPerTx, Archived: *archived, NotDue: *notDue, ChosenKeys: *chosenKeys,
		Relay: relay.Config{Notify: *notify},
	}
	if o.DatabaseURL == "" || o.NatsURL == "" {
		fmt.Fprintln(os.Stderr, "benchcmp: set DATABASE_URL and NATS_URL")
		os.Exit(2)
	}
	if *binary != "" && (o.Mode != "backlog" || o.Archived > 0 || o.NotDue > 0) {
		fmt.Fprintln(os.Stderr, "benchcmp: -binary measures a backlog drain against refloop only (no -mode steady, -archived or -not-due)")
		os.Exit(2)
	}
	if err := compare(context.Background(), o, *refloop, *binary, *rounds, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchcmp:", err)
		os.Exit(1)
	}
}

// compare runs the relay's benchmark (or the binary, when set: runBinary)
// and a baseline alternately, rounds
// times each, on the same database and NATS server, and reports every run
// and the median of the per-round ratios. The baseline is the reference
// loop (refloop, built from ../shared/refloop), or, when o fills the
// archive or adds rows not yet due, the relay itself without them. Each
// run's PostgreSQL CPU is measured over the whole run, inserts included,
// when the server is local. Ratios from one run are comparable; absolute
// numbers from different runs are not (the machines are shared and noisy).
func compare(ctx context.Context, o bench.Options, refloop, binary string, rounds int, w io.Writer) error {
	pool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	pg, err := bench.NewPostgresCPU(ctx, pool)
	if err != nil {
		fmt.Fprintf(w, "PostgreSQL CPU: %v\n", err)
	}
	measured := func(run func() (bench.Result, error)) (bench.Result, float64, error) {
		var before time.Duration
		if pg != nil {
			before, _ = pg.Used()
		}
		res, err := run()
		if err != nil || pg == nil {
			return res, 0, err
		}
		after, _ := pg.Used()
		return res, (after - before).Seconds() * 100000 / float64(o.N), nil
	}
	baselineName := "refloop"
	baseline := func() (bench.Result, error) { return runRefloop(ctx, refloop, o) }
	if o.Archived > 0 || o.NotDue > 0 {
		baselineName = "outbox-relay on empty tables"
		b := o
		b.Archived, b.NotDue = 0, 0
		baseline = func() (bench.Result, error) { return runRelay(ctx, b) }
	}
	var ratios, cpuRatios []float64
	for round := 1; round <= rounds; round++ {
		ours := func() (bench.Result, error) { return runRelay(ctx, o) }
		if binary != "" {
			ours = func() (bench.Result, error) { return runBinary(ctx, binary, o) }
		}
		res, ourCPU, err := measured(ours)
		if err != nil {
			return fmt.Errorf("round %d: outbox-relay: %w", round, err)
		}
		ref, refCPU, err := measured(baseline)
		if err != nil {
			return fmt.Errorf("round %d: %s: %w", round, baselineName, err)
		}
		if o.Archived > 0 || o.NotDue > 0 {
			// Both runs are the relay: compare their drains, without the
			// prefill.
			ourCPU, _ = res.Extra[bench.ExtraPostgresCPU].(float64)
			refCPU, _ = ref.Extra[bench.ExtraPostgresCPU].(float64)
		}
		if !res.Verified || !ref.Verified {
			return fmt.Errorf("round %d: a run did not verify (outbox-relay %v, %s %v)", round, res.Verified, baselineName, ref.Verified)
		}
		ratio := res.EventsPerSec / ref.EventsPerSec
		if o.Mode == "steady" && res.P99ms != nil && ref.P99ms != nil {
			ratio = *ref.P99ms / *res.P99ms
		}
		ratios = append(ratios, ratio)
		cpu := ""
		if pg != nil && refCPU > 0 {
			cpuRatios = append(cpuRatios, ourCPU/refCPU)
			cpu = fmt.Sprintf(" | PostgreSQL CPU per 100k %.2f s vs %.2f s (%.2f×)", ourCPU, refCPU, ourCPU/refCPU)
		}
		fmt.Fprintf(w, "round %d: outbox-relay %s | %s %s | ratio %.2f%s\n", round, summary(res), baselineName, summary(ref), ratio, cpu)
	}
	fmt.Fprintf(w, "median ratio (outbox-relay / %s, %s) over %d rounds: %.2f\n", baselineName, basis(o.Mode), rounds, median(ratios))
	if len(cpuRatios) > 0 {
		span := "whole run with inserts"
		if o.Archived > 0 || o.NotDue > 0 {
			span = "drain"
		}
		fmt.Fprintf(w, "median PostgreSQL CPU ratio (outbox-relay / %s, %s, lower is better): %.2f\n", baselineName, span, median(cpuRatios))
	}
	return nil
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

func runRelay(ctx context.Context, o bench.Options) (bench.Result, error) {
	var out bytes.Buffer
	if err := bench.Run(ctx, o, &out); err != nil {
		return bench.Result{}, err
	}
	var res bench.Result
	err := json.Unmarshal(out.Bytes(), &res)
	return res, err
}

func basis(mode string) string {
	if mode == "steady" {
		return "refloop p99 / ours p99, higher is better"
	}
	return "events/s"
}

func summary(r bench.Result) string {
	s := fmt.Sprintf("%.0f events/s", r.EventsPerSec)
	if r.P50ms != nil && r.P99ms != nil {
		s += fmt.Sprintf(", p50 %.1f ms, p99 %.1f ms", *r.P50ms, *r.P99ms)
	}
	if first, ok := r.Extra["first_delivery_ms"].(float64); ok {
		s += fmt.Sprintf(", first after %.0f ms", first)
	}
	return s
}

// runRefloop runs the reference loop with the parameters of o: batches of
// 1000 and two workers, as its README measures it.
func runRefloop(ctx context.Context, bin string, o bench.Options) (bench.Result, error) {
	args := []string{
		"-n", strconv.Itoa(o.N), "-payload", strconv.Itoa(o.PayloadBytes),
		"-batch", "1000", "-workers", "2", "-mode", o.Mode,
		"-producers", strconv.Itoa(max(o.Producers, 1)), "-producer-batch", strconv.Itoa(max(o.RowsPerTx, 1)),
		"-dsn", o.DatabaseURL, "-nats", o.NatsURL,
	}
	if o.Mode == "steady" {
		args = append(args, "-rate", strconv.FormatFloat(o.Rate, 'f', -1, 64))
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
