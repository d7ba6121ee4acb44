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
	flag.Parse()
	o := bench.Options{
		DatabaseURL: os.Getenv("DATABASE_URL"), NatsURL: os.Getenv("NATS_URL"), Schema: *schema,
		Mode: *mode, N: *n, PayloadBytes: *payload, Rate: *rate, Timeout: 10 * time.Minute,
		Relay: relay.Config{Notify: *notify},
	}
	if o.DatabaseURL == "" || o.NatsURL == "" {
		fmt.Fprintln(os.Stderr, "benchcmp: set DATABASE_URL and NATS_URL")
		os.Exit(2)
	}
	if err := compare(context.Background(), o, *refloop, *rounds, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchcmp:", err)
		os.Exit(1)
	}
}

// compare runs the relay's benchmark and the reference loop (refloop, built
// from ../shared/refloop) alternately, rounds times each, on the same
// database and NATS server, and reports every run and the median of the
// per-round ratios. Ratios from one run are comparable; absolute numbers
// from different runs are not (the machines are shared and noisy).
func compare(ctx context.Context, o bench.Options, refloop string, rounds int, w io.Writer) error {
	var ratios []float64
	for round := 1; round <= rounds; round++ {
		var ours bytes.Buffer
		if err := bench.Run(ctx, o, &ours); err != nil {
			return fmt.Errorf("round %d: outbox-relay: %w", round, err)
		}
		var res bench.Result
		if err := json.Unmarshal(ours.Bytes(), &res); err != nil {
			return err
		}
		ref, err := runRefloop(ctx, refloop, o)
		if err != nil {
			return fmt.Errorf("round %d: refloop: %w", round, err)
		}
		if !res.Verified || !ref.Verified {
			return fmt.Errorf("round %d: a run did not verify (outbox-relay %v, refloop %v)", round, res.Verified, ref.Verified)
		}
		ratio := res.EventsPerSec / ref.EventsPerSec
		if o.Mode == "steady" && res.P99ms != nil && ref.P99ms != nil {
			ratio = *ref.P99ms / *res.P99ms
		}
		ratios = append(ratios, ratio)
		fmt.Fprintf(w, "round %d: outbox-relay %s | refloop %s | ratio %.2f\n", round, summary(res), summary(ref), ratio)
	}
	slices.Sort(ratios)
	fmt.Fprintf(w, "median ratio (outbox-relay / refloop, %s) over %d rounds: %.2f\n", basis(o.Mode), rounds, ratios[len(ratios)/2])
	return nil
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
	return s
}

// runRefloop runs the reference loop with the parameters of o: batches of
// 1000 and two workers, as its README measures it.
func runRefloop(ctx context.Context, bin string, o bench.Options) (bench.Result, error) {
	args := []string{
		"-n", strconv.Itoa(o.N), "-payload", strconv.Itoa(o.PayloadBytes),
		"-batch", "1000", "-workers", "2", "-mode", o.Mode,
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
