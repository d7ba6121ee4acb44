package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The comparison of the relay's delivery modes (-modes): for each number of
// replicas, the relay in unordered mode (every relay claims from the whole
// table with SKIP LOCKED), in ordered mode and in partitioned mode, each on
// rows without a key and, with -keys, on keyed rows too (the same backlog
// with o.Keys keys in o.KeyOrder), and refloop with two workers per relay
// (on rows without a key: it has no key column and keeps no order), one
// after the other, round by round; then one table of medians.

// modesShape is the rows of a run: unkeyed (keys 0) or keyed.
type modesShape struct {
	keys  int
	order string
}

func (s modesShape) String() string {
	if s.keys == 0 {
		return "unkeyed"
	}
	return fmt.Sprintf("%d keys, %s", s.keys, s.order)
}

// modesRun is one contender of a cell: the relays in one mode on one shape
// of rows, or refloop (mode empty).
type modesRun struct {
	mode    outbox.Mode
	shape   modesShape
	results []bench.Result
	// Per round, how much better it did than unordered mode on the same
	// rows (not for unordered mode itself) and than refloop (ratio).
	vsUnordered, vsRefloop []float64
}

func (r *modesRun) name(workers int) string {
	if r.mode == "" {
		return fmt.Sprintf("refloop (%d workers)", workers)
	}
	return string(r.mode)
}

// modesCell is what the rounds with one number of replicas measured.
type modesCell struct {
	replicas, workers int
	// relays in the table's order: by shape (unkeyed first), then mode.
	relays  []*modesRun
	refloop *modesRun
}

// modesModes are the relay's modes the comparison runs, in the table's
// order.
var modesModes = []outbox.Mode{outbox.ModeUnordered, outbox.ModeOrdered, outbox.ModePartitioned}

// modesShapes are the shapes of rows the comparison runs for o: unkeyed,
// and keyed when o.Keys is set.
func modesShapes(o bench.Options) []modesShape {
	shapes := []modesShape{{}}
	if o.Keys > 0 {
		shapes = append(shapes, modesShape{keys: o.Keys, order: bench.KeyOrderOf(o)})
	}
	return shapes
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

// modesRounds runs the relay in each mode on each shape of rows and
// refloop, with o.Replicas relays (refloopWorkers workers), rounds times
// each, and prints each round with its ratios. With binary, the relays are
// that many processes of it started stagger apart (runBinary). A run that
// does not verify ends the comparison.
func modesRounds(ctx context.Context, o bench.Options, refloop, binary string, stagger time.Duration, rounds int, w io.Writer) (modesCell, error) {
	cell := modesCell{replicas: o.Replicas, workers: refloopWorkers(o)}
	shapes := modesShapes(o)
	type contender struct {
		run *modesRun
		do  func() (bench.Result, error)
	}
	// The order they run in within a round: each mode on each shape in
	// turn, then refloop.
	var contenders []contender
	byShape := map[modesShape][]*modesRun{}
	for _, mode := range modesModes {
		for _, shape := range shapes {
			ro := o
			ro.Relay.Mode = mode
			ro.Keys, ro.KeyOrder = shape.keys, shape.order
			run := &modesRun{mode: mode, shape: shape}
			byShape[shape] = append(byShape[shape], run)
			do := func() (bench.Result, error) { return runRelay(ctx, ro) }
			if binary != "" {
				do = func() (bench.Result, error) { return runBinary(ctx, binary, ro, stagger) }
			}
			contenders = append(contenders, contender{run, do})
		}
	}
	for _, shape := range shapes {
		cell.relays = append(cell.relays, byShape[shape]...)
	}
	ro := o
	ro.Keys, ro.KeyOrder = 0, ""
	cell.refloop = &modesRun{}
	contenders = append(contenders, contender{cell.refloop, func() (bench.Result, error) { return runRefloop(ctx, refloop, ro) }})
	for round := 1; round <= rounds; round++ {
		// Each round starts with the next one, so that none always runs
		// first on a machine the others warmed up or tired.
		for i := range contenders {
			c := contenders[(round-1+i)%len(contenders)]
			res, err := c.do()
			if err != nil {
				return cell, fmt.Errorf("round %d: %s, %s rows: %w", round, c.run.name(cell.workers), c.run.shape, err)
			}
			if !res.Verified {
				return cell, fmt.Errorf("round %d: %s, %s rows did not verify: %d events, extra %v", round, c.run.name(cell.workers), c.run.shape, res.Events, res.Extra)
			}
			c.run.results = append(c.run.results, res)
		}
		ref := cell.refloop.results[round-1]
		for s, shape := range shapes {
			runs := byShape[shape]
			unordered := runs[0].results[round-1]
			var figs, ratios []string
			for _, r := range runs {
				res := r.results[round-1]
				figs = append(figs, fmt.Sprintf("%s %s", r.mode, summary(res)))
				if r.mode != outbox.ModeUnordered {
					r.vsUnordered = append(r.vsUnordered, ratio(o.Mode, res, unordered))
					ratios = append(ratios, fmt.Sprintf("%s/unordered %.2f", r.mode, r.vsUnordered[round-1]))
				}
			}
			for _, r := range runs {
				r.vsRefloop = append(r.vsRefloop, ratio(o.Mode, r.results[round-1], ref))
				ratios = append(ratios, fmt.Sprintf("%s/refloop %.2f", r.mode, r.vsRefloop[round-1]))
			}
			if s == 0 {
				figs = append(figs, fmt.Sprintf("refloop (%d workers, unkeyed rows) %s", cell.workers, summary(ref)))
			}
			fmt.Fprintf(w, "%d replicas, round %d, %s rows: %s | %s\n", o.Replicas, round, shape, strings.Join(figs, " | "), strings.Join(ratios, ", "))
		}
	}
	return cell, nil
}

// printModesTable prints, per number of replicas, one Markdown row per
// mode and shape of rows: the median of its figures (drain time and
// events/s for a backlog; p50 / p99 and the events/s reached for a steady
// stream), of its ratios against unordered mode on the same rows and
// against refloop, and of when partitioned relays shared the buckets.
func printModesTable(w io.Writer, o bench.Options, cells []modesCell) {
	if len(cells) == 0 {
		return
	}
	shape := fmt.Sprintf("a backlog of %d events", o.N)
	if o.Burst {
		shape += " due at one shared timestamp"
	}
	columns, ratios := "drain s | events/s", "the first's events/s over the second's"
	if o.Mode == "steady" {
		shape = fmt.Sprintf("a steady %.0f events/s, %d events", o.Rate, o.N)
		columns, ratios = "p50 / p99 ms (events/s)", "the second's p99 over the first's"
	}
	keyed := ""
	if o.Keys > 0 {
		keyed = fmt.Sprintf(" Keyed rows: %d keys, about %d rows each, %s (%s).", o.Keys, o.N/o.Keys, bench.KeyOrderOf(o),
			map[string]string{bench.KeyInterleaved: "row i has key i mod keys, as producers write them", bench.KeyGrouped: "each key's rows consecutive"}[bench.KeyOrderOf(o)])
	}
	fmt.Fprintf(w, "\nMedians over %d rounds: %s, payload %d bytes.%s Ratios: %s (above 1, the first is better); / unordered is against unordered mode on the same rows; refloop runs rows without a key only (it has no key column and keeps no order).\n\n",
		len(cells[0].refloop.results), shape, o.PayloadBytes, keyed, ratios)
	fmt.Fprintf(w, "| replicas | relay | rows | %s | / unordered, same rows | / refloop | buckets shared after |\n", columns)
	fmt.Fprintf(w, "| --: | --- | --- |%s --: | --: | --- |\n", strings.Repeat(" --: |", strings.Count(columns, "|")+1))
	for _, c := range cells {
		for _, r := range c.relays {
			vsUnord, buckets := "—", "—"
			if r.mode != outbox.ModeUnordered {
				vsUnord = fmt.Sprintf("%.2f", median(r.vsUnordered))
			}
			if r.mode == outbox.ModePartitioned {
				buckets = bucketsShared(r.results)
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %.2f | %s |\n", c.replicas, r.name(c.workers), r.shape,
				figures(o.Mode, r.results), vsUnord, median(r.vsRefloop), buckets)
		}
		fmt.Fprintf(w, "| %d | %s | unkeyed (takes no keys) | %s | — | — | — |\n", c.replicas, c.refloop.name(c.workers),
			figures(o.Mode, c.refloop.results))
	}
}

// figures is the median figure of runs for the table.
func figures(mode string, runs []bench.Result) string {
	rate := medianOf(runs, func(r bench.Result) (float64, bool) { return r.EventsPerSec, true })
	if mode != "steady" {
		// The drain of the run with the median rate (with an even number
		// of rounds, the upper median, as median takes), so that the two
		// columns are of one run.
		secs := 0.0
		if rate > 0 {
			secs = float64(runs[0].Events) / rate
		}
		return fmt.Sprintf("%.1f | %.0f", secs, rate)
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
