package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The comparison of the relay's delivery modes (-modes): for each number of
// replicas, the relay in unordered mode (every relay claims from the whole
// table with SKIP LOCKED), the relay in partitioned mode and refloop with
// two workers per relay, one after the other, round by round; then one
// table of medians.

// modesCell is what the rounds with one number of replicas measured.
type modesCell struct {
	replicas, workers               int
	unordered, partitioned, refloop []bench.Result
	// Per round, how much better the first did than the second (ratio).
	partVsUnord, unordVsRef, partVsRef []float64
}

// compareModes measures every count of counts (modesRounds) and prints the
// table of their medians.
func compareModes(ctx context.Context, o bench.Options, refloop, binary string, stagger time.Duration, counts []int, rounds int, w io.Writer) error {
	cells := make([]modesCell, 0, len(counts))
	for _, n := range counts {
		o.Replicas = n
		cell, err := modesRounds(ctx, o, refloop, binary, stagger, rounds, w)
		if err != nil {
			return fmt.Errorf("%d replicas: %w", n, err)
		}
		cells = append(cells, cell)
	}
	printModesTable(w, o, cells)
	return nil
}

// modesRounds runs the relay in unordered and in partitioned mode and
// refloop, with o.Replicas relays (refloopWorkers workers), rounds times
// each, and prints each round with its ratios. With binary, the relays are
// that many processes of it started stagger apart (runBinary). A run that
// does not verify ends the comparison.
func modesRounds(ctx context.Context, o bench.Options, refloop, binary string, stagger time.Duration, rounds int, w io.Writer) (modesCell, error) {
	unordered, partitioned := o, o
	unordered.Relay.Mode, partitioned.Relay.Mode = outbox.ModeUnordered, outbox.ModePartitioned
	cell := modesCell{replicas: o.Replicas, workers: refloopWorkers(o)}
	relays := func(o bench.Options) func() (bench.Result, error) {
		if binary != "" {
			return func() (bench.Result, error) { return runBinary(ctx, binary, o, stagger) }
		}
		return func() (bench.Result, error) { return runRelay(ctx, o) }
	}
	contenders := []struct {
		name    string
		results *[]bench.Result
		run     func() (bench.Result, error)
	}{
		{"unordered", &cell.unordered, relays(unordered)},
		{"partitioned", &cell.partitioned, relays(partitioned)},
		{"refloop", &cell.refloop, func() (bench.Result, error) { return runRefloop(ctx, refloop, o) }},
	}
	for round := 1; round <= rounds; round++ {
		// Each round starts with the next one, so that none always runs
		// first on a machine the others warmed up or tired.
		for i := range contenders {
			c := contenders[(round-1+i)%len(contenders)]
			res, err := c.run()
			if err != nil {
				return cell, fmt.Errorf("round %d: %s: %w", round, c.name, err)
			}
			if !res.Verified {
				return cell, fmt.Errorf("round %d: %s did not verify: %d events, extra %v", round, c.name, res.Events, res.Extra)
			}
			*c.results = append(*c.results, res)
		}
		u, p, r := cell.unordered[round-1], cell.partitioned[round-1], cell.refloop[round-1]
		cell.partVsUnord = append(cell.partVsUnord, ratio(o.Mode, p, u))
		cell.unordVsRef = append(cell.unordVsRef, ratio(o.Mode, u, r))
		cell.partVsRef = append(cell.partVsRef, ratio(o.Mode, p, r))
		fmt.Fprintf(w, "%d replicas, round %d: unordered %s | partitioned %s | refloop (%d workers) %s | partitioned/unordered %.2f, unordered/refloop %.2f, partitioned/refloop %.2f\n",
			o.Replicas, round, summary(u), summary(p), cell.workers, summary(r),
			cell.partVsUnord[round-1], cell.unordVsRef[round-1], cell.partVsRef[round-1])
	}
	return cell, nil
}

// printModesTable prints one Markdown row per number of replicas: the
// median of each program's figure (events/s for a backlog; p50 / p99 and
// the events/s reached for a steady stream), of each ratio, and of when the
// partitioned relays shared the buckets.
func printModesTable(w io.Writer, o bench.Options, cells []modesCell) {
	if len(cells) == 0 {
		return
	}
	shape := fmt.Sprintf("a backlog of %d events", o.N)
	if o.Burst {
		shape += " due at one shared timestamp"
	}
	figure, ratios := "events/s", "the first's events/s over the second's"
	if o.Mode == "steady" {
		shape = fmt.Sprintf("a steady %.0f events/s, %d events", o.Rate, o.N)
		figure, ratios = "p50 / p99 ms (events/s)", "the second's p99 over the first's"
	}
	fmt.Fprintf(w, "\nMedians over %d rounds: %s, payload %d bytes. Ratios: %s (above 1, the first is better).\n\n",
		len(cells[0].unordered), shape, o.PayloadBytes, ratios)
	fmt.Fprintf(w, "| replicas | unordered %[1]s | partitioned %[1]s | refloop %[1]s | refloop workers | partitioned / unordered | unordered / refloop | partitioned / refloop | buckets shared after |\n", figure)
	fmt.Fprintln(w, "| --: | --: | --: | --: | --: | --: | --: | --: | --: |")
	for _, c := range cells {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %d | %.2f | %.2f | %.2f | %s |\n", c.replicas,
			figures(o.Mode, c.unordered), figures(o.Mode, c.partitioned), figures(o.Mode, c.refloop), c.workers,
			median(c.partVsUnord), median(c.unordVsRef), median(c.partVsRef), bucketsShared(c.partitioned))
	}
}

// figures is the median figure of runs for the table.
func figures(mode string, runs []bench.Result) string {
	rate := medianOf(runs, func(r bench.Result) (float64, bool) { return r.EventsPerSec, true })
	if mode != "steady" {
		return fmt.Sprintf("%.0f", rate)
	}
	p50 := medianOf(runs, func(r bench.Result) (float64, bool) { return deref(r.P50ms) })
	p99 := medianOf(runs, func(r bench.Result) (float64, bool) { return deref(r.P99ms) })
	return fmt.Sprintf("%.1f / %.1f (%.0f)", p50, p99, rate)
}

// bucketsShared is the median time until every partitioned relay held its
// share of the buckets, over the runs that got there before they ended.
func bucketsShared(runs []bench.Result) string {
	var at []float64
	for _, r := range runs {
		if ms, ok := r.Extra[bench.ExtraBucketsShared].(float64); ok {
			at = append(at, ms)
		}
	}
	switch len(at) {
	case 0:
		return "not before the end"
	case len(runs):
		return fmt.Sprintf("%.0f ms", median(at))
	}
	return fmt.Sprintf("%.0f ms in %d of %d runs", median(at), len(at), len(runs))
}

// medianOf is the median of the figures of runs that have one (0 when none
// has).
func medianOf(runs []bench.Result, of func(bench.Result) (float64, bool)) float64 {
	var v []float64
	for _, r := range runs {
		if x, ok := of(r); ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0
	}
	return median(v)
}

func deref(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}
