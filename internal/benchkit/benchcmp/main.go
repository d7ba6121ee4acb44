// Command benchcmp runs outbox-relay's benchmark and refloop, a reference
// loop (by default the bare loop of internal/benchkit/yardstick; make bench builds
// it from REFLOOP), alternately on the same database and NATS server, and
// prints each round and the median ratio. With -modes it runs
// the relay in its unordered, ordered and partitioned modes beside refloop
// (modes.go), on rows without a key and, with -keys K, on rows with K keys
// too (-key-order interleaved or grouped). It is a developer tool (make bench, make bench-replicas), not
// part of the shipped binary:
//
//	DATABASE_URL=… NATS_URL=… go run ./internal/benchkit/benchcmp -refloop bin/refloop -rounds 5
//	DATABASE_URL=… NATS_URL=… go run ./internal/benchkit/benchcmp -refloop bin/refloop -modes -replicas 1,2,4,8 -burst -n 200000
//
// With -binary the relays are processes of the shipped binary, with their
// defaults; -replicas N starts N of them one after another, -stagger apart
// (make bench-processes):
//
//	DATABASE_URL=… NATS_URL=… go run ./internal/benchkit/benchcmp -refloop bin/refloop -modes -binary bin/outbox-relay -replicas 4 -burst -n 200000 -keys 5000 -key-order interleaved
//
// With -pin-horizon it runs the pinned-horizon benchmark instead
// (pinhorizon.go, make bench-pin-horizon), on a PostgreSQL server of its
// own, the horizon pinned one of three ways (-pin-how snapshot, xid or
// readers):
//
//	go run ./internal/benchkit/benchcmp -pin-horizon -binary bin/outbox-relay -refloop bin/refloop -duration 10m -pin-after 1m -pin-how xid
//
// With -many-outboxes it runs the many-outboxes benchmark (many.go, make
// bench-many-outboxes), on a server of its own as well:
//
//	go run ./internal/benchkit/benchcmp -many-outboxes -binary bin/outbox-relay -outboxes 50 -duration 60s
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/internal/gctune"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

func main() {
	refloop := flag.String("refloop", "bin/refloop", "path of the reference loop's binary (make bench builds internal/benchkit/yardstick, or REFLOOP, there)")
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
	binary := flag.String("binary", "", "backlog mode: measure this outbox-relay binary, run with its defaults, from exec until the table is empty (instead of the in-process benchmark); with -replicas N, N processes started -stagger apart")
	stagger := flag.Duration("stagger", time.Second, "-binary with -replicas: time between the starts of the relay processes, as users start them one after another")
	chosenKeys := flag.Bool("chosen-keys", false, "give every row an idempotency key of the producer's choosing (looked up and recorded)")
	notDue := flag.Int("not-due", 0, "add this many rows due in a day (compared with the relay without them, not refloop)")
	replicas := flag.String("replicas", "1", "relays run at once, or a comma-separated list of counts measured one after the other (1,2,4,8); refloop runs two workers per relay, as each relay has two claim loops")
	partitioned := flag.Bool("partitioned", false, "run the relay in partitioned mode (RELAY_MODE=partitioned)")
	burst := flag.Bool("burst", false, "backlog mode: every row due at the same time, for the relay and for refloop (its -burst)")
	modes := flag.Bool("modes", false, "run the relay in unordered, ordered and partitioned mode alternately with refloop, with the same replicas, on rows without a key and (with -keys) on keyed rows, and print the ratios of each round and a table of medians")
	pinHorizon := flag.Bool("pin-horizon", false, "the pinned-horizon benchmark (pinhorizon.go): the relay binary (-binary, default bin/outbox-relay) and refloop, each on its own database with a steady producer at -rate (default 1000, from -producers connections, default 8), while sessions pin the horizon of some of them (-pin-how); a table every -every")
	duration := flag.Duration("duration", 10*time.Minute, "-pin-horizon: length of the run")
	every := flag.Duration("every", time.Minute, "-pin-horizon: sampling interval")
	pinAfter := flag.Duration("pin-after", time.Minute, "-pin-horizon: when the pin starts")
	pinFor := flag.Duration("pin-for", 0, "-pin-horizon: how long the pin is held (0: to the end of the run), to see what the tables keep after it ends")
	pinHow := flag.String("pin-how", pinHowSnapshot, "-pin-horizon: how the pinned databases' horizon is pinned: snapshot (a REPEATABLE READ transaction holding its snapshot), xid (an idle READ COMMITTED transaction holding a transaction id, as BEGIN; SELECT txid_current(); left open) or readers (four REPEATABLE READ readers each scanning the hot table and the archive, 50 ms apart, until the end)")
	pgURL := flag.String("pg-url", "", "-pin-horizon, -many-outboxes: an existing PostgreSQL server (with pg_stat_statements preloaded) instead of one of the benchmark's own")
	pgBin := flag.String("pg-bin", "", "-pin-horizon, -many-outboxes: directory of initdb and pg_ctl (default: the newest /usr/lib/postgresql/*/bin, else PATH)")
	var pgConf settingsFlag
	flag.Var(&pgConf, "pg-conf", "-pin-horizon, -many-outboxes: one more setting name=value of the benchmark's own servers, repeatable (e.g. -pg-conf shared_preload_libraries=pg_stat_statements,auto_explain -pg-conf auto_explain.log_min_duration=50ms); their log is postgres.log in the server's temporary directory")
	pgPort := flag.Int("pg-port", 5499, "-pin-horizon, -many-outboxes: port of the benchmark's own server (a free one when taken)")
	serverEach := flag.Bool("server-each", false, "-pin-horizon: run the unpinned contenders on a second server of the benchmark's own (on port -pg-port+1, or a free one), so that a pin holding every database of its server (-pin-how xid) holds only the pinned ones; the default with -pin-how xid and no -pg-url")
	natsURL := flag.String("nats-url", "", "-pin-horizon, -many-outboxes: NATS server of the relays (default: a JetStream server in process for each)")
	relayMode := flag.String("relay-mode", "", "-pin-horizon: the relays' RELAY_MODE (ordered, partitioned; default: the relay's default); the producers then give each row one of -keys keys")
	keys := flag.Int("keys", 100, "-pin-horizon with -relay-mode, or a backlog (in process, -binary, -modes) when set: keys the rows are spread over (0: rows without a key); -modes then runs every mode on rows without a key and on these keyed rows")
	keyOrder := flag.String("key-order", bench.KeyInterleaved, "a backlog with -keys: interleaved (row i has key i mod keys, as producers write them) or grouped (each key's rows consecutive)")
	var relayEnv settingsFlag
	flag.Var(&relayEnv, "relay-env", "-pin-horizon: a setting NAME=value every relay runs with besides its defaults, as RELAY_ARCHIVE_RETENTION=5m (repeatable)")
	refloopUnpinned := flag.Bool("refloop-unpinned", false, "-pin-horizon: also run refloop on an unpinned database")
	jsonOut := flag.String("json", "", "-pin-horizon, -many-outboxes: also write the report as JSON to this file")
	manyOutboxes := flag.Bool("many-outboxes", false, "the many-outboxes benchmark (many.go): the relay binary (-binary, default bin/outbox-relay) serving -outboxes idle schemas in four configurations, each measured for -duration (default 60s) after -warmup; then a -backlog in one schema beside a trickle of -trickle-rate rows/s in another")
	outboxes := flag.Int("outboxes", 50, "-many-outboxes: idle outboxes (schemas) served by one relay")
	warmup := flag.Duration("warmup", 30*time.Second, "-many-outboxes: time each idle configuration runs before it is measured")
	baseline := flag.Duration("baseline", 20*time.Second, "-many-outboxes: time the server alone is measured first (0 skips it)")
	backlog := flag.Int("backlog", 200000, "-many-outboxes: rows due in schema hot")
	trickleRate := flag.Float64("trickle-rate", 20, "-many-outboxes: rows per second into schema cold, one per transaction")
	trickleAlone := flag.Duration("trickle-alone", 45*time.Second, "-many-outboxes: how long the trickle is measured once hot is empty (longer, a minute at most, until 20 of its rows were committed)")
	parts := flag.String("parts", "idle,fair", "-many-outboxes: the parts run, idle and/or fair")
	flag.Parse()
	// The in-process relays run with the binary's collector settings.
	gctune.Apply(os.Environ(), nil)
	if *manyOutboxes {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		o := manyOptions{
			Binary: *binary, PGURL: *pgURL, PGBin: *pgBin, PGPort: *pgPort, PGConf: pgConf, NatsURL: *natsURL,
			Parts: strings.Split(*parts, ","), Outboxes: *outboxes, Warmup: *warmup, Duration: *duration,
			Baseline: *baseline, Backlog: *backlog, TrickleRate: *trickleRate, TrickleAlone: *trickleAlone,
			PayloadBytes: *payload, JSON: *jsonOut,
		}
		if !set["binary"] {
			o.Binary = "bin/outbox-relay"
		}
		if !set["duration"] {
			o.Duration = time.Minute
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		_, err := runManyOutboxes(ctx, o, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchcmp:", err)
			os.Exit(1)
		}
		return
	}
	if *pinHorizon {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		o := pinOptions{
			Binary: *binary, Refloop: *refloop, RefloopUnpinned: *refloopUnpinned,
			PGURL: *pgURL, PGBin: *pgBin, PGPort: *pgPort, PGConf: pgConf, NatsURL: *natsURL,
			Duration: *duration, Every: *every, PinAfter: *pinAfter, PinFor: *pinFor, PinHow: *pinHow,
			Rate: *rate, Producers: *producers, PayloadBytes: *payload, JSON: *jsonOut,
			Mode: *relayMode, Keys: *keys, RelayEnv: relayEnv, ServerEach: *serverEach,
		}
		if !set["server-each"] && o.PinHow == pinHowXID && o.PGURL == "" {
			o.ServerEach = true
		}
		if !set["binary"] {
			o.Binary = "bin/outbox-relay"
		}
		if !set["rate"] {
			o.Rate = 1000
		}
		if !set["producers"] {
			// Four connections fell short of 1000 single-row commits a
			// second into the relay's table on the loaded two-core
			// machine (630/s, refloop's 995/s); the pacing, shared by the
			// connections, keeps the rate, so more only help reach it.
			o.Producers = 8
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		_, err := runPinHorizon(ctx, o, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchcmp:", err)
			os.Exit(1)
		}
		return
	}
	o := bench.Options{
		DatabaseURL: os.Getenv("DATABASE_URL"), NatsURL: os.Getenv("NATS_URL"), Schema: *schema,
		Mode: *mode, N: *n, PayloadBytes: *payload, Rate: *rate, Timeout: 10 * time.Minute,
		Producers: *producers, RowsPerTx: *rowsPerTx, Archived: *archived, NotDue: *notDue, ChosenKeys: *chosenKeys,
		Burst: *burst, Relay: relay.Config{Notify: *notify, Mode: map[bool]outbox.Mode{true: outbox.ModePartitioned}[*partitioned]},
	}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "keys" {
			o.Keys = *keys
		}
	})
	if o.Keys > 0 {
		o.KeyOrder = *keyOrder
	}
	counts, err := parseCounts(*replicas)
	usage := func(msg string) {
		fmt.Fprintln(os.Stderr, "benchcmp:", msg)
		os.Exit(2)
	}
	switch {
	case o.DatabaseURL == "" || o.NatsURL == "":
		usage("set DATABASE_URL and NATS_URL")
	case err != nil:
		usage(err.Error())
	case *binary != "" && (o.Mode != "backlog" || o.Archived > 0 || o.NotDue > 0 || len(counts) > 1):
		usage("-binary measures relay processes' backlog drain with their defaults (no -mode steady, -archived, -not-due, or a list of -replicas)")
	case *modes && (*partitioned || o.Archived > 0 || o.NotDue > 0):
		usage("-modes runs every mode against refloop (no -partitioned, -archived or -not-due)")
	case o.Keys > 0 && o.Mode != "backlog":
		usage("-keys spreads the backlog's rows over keys (-mode backlog, or -pin-horizon with -relay-mode); a steady producer writes no key")
	}
	if err := o.Validate(); err != nil {
		usage(err.Error())
	}
	ctx := context.Background()
	if *modes {
		err = compareModes(ctx, o, *refloop, *binary, *stagger, counts, *rounds, os.Stdout)
	}
	for i := 0; !*modes && i < len(counts) && err == nil; i++ {
		o.Replicas = counts[i]
		if len(counts) > 1 {
			fmt.Fprintf(os.Stdout, "== %d replicas\n", counts[i])
		}
		err = compare(ctx, o, *refloop, *binary, *stagger, *rounds, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcmp:", err)
		os.Exit(1)
	}
}

// parseCounts reads a comma-separated list of replica counts.
func parseCounts(list string) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > bench.MaxReplicas {
			return nil, fmt.Errorf("-replicas %q: want counts from 1 to %d, separated by commas", list, bench.MaxReplicas)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// compare runs the relay's benchmark (or the binary, when set: runBinary)
// and a baseline alternately, rounds
// times each, on the same database and NATS server, and reports every run
// and the median of the per-round ratios. The baseline is the reference
// loop (refloop, built from internal/benchkit/yardstick), or, when o fills the
// archive or adds rows not yet due, the relay itself without them. Each
// run's PostgreSQL CPU is measured over the whole run, inserts included,
// when the server is local; with the binary, over the drain as well (for
// refloop: its run less a run of its preload alone). Ratios from one run are comparable; absolute
// numbers from different runs are not (the machines are shared and noisy).
func compare(ctx context.Context, o bench.Options, refloop, binary string, stagger time.Duration, rounds int, w io.Writer) error {
	pool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	pg, err := bench.NewPostgresCPU(ctx, pool)
	if err != nil {
		fmt.Fprintf(w, "PostgreSQL CPU: %v\n", err)
	}
	var checkpointOnce sync.Once
	measured := func(run func() (bench.Result, error)) (bench.Result, float64, error) {
		// Every run starts from a checkpoint, so that none is measured
		// across one that the WAL of the runs before it brought due (a
		// 10k/s run writes about 250 MB, and the server checkpoints every
		// max_wal_size, 1 GB by default): its fsyncs and the full-page
		// images after it set the p99 of whichever run it fell in.
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			checkpointOnce.Do(func() { fmt.Fprintf(w, "CHECKPOINT before each run: %v (runs may span checkpoints)\n", err) })
		}
		var before time.Duration
		if pg != nil {
			before, _ = pg.Used()
		}
		res, err := run()
		if err != nil || pg == nil {
			return res, 0, err
		}
		after, _ := pg.Used()
		// The binary's runs poll the table until it is empty: that
		// backend's CPU is the benchmark's, not the relay's.
		poll, _ := res.Extra[bench.ExtraPollPostgresCPU].(float64)
		return res, (after-before).Seconds()*100000/float64(o.N) - poll, nil
	}
	baselineName := "refloop"
	if o.Replicas > 1 {
		baselineName = fmt.Sprintf("refloop (%d workers)", refloopWorkers(o))
	}
	baseline := func() (bench.Result, error) { return runRefloop(ctx, refloop, o) }
	if o.Archived > 0 || o.NotDue > 0 {
		baselineName = "outbox-relay on empty tables"
		b := o
		b.Archived, b.NotDue = 0, 0
		baseline = func() (bench.Result, error) { return runRelay(ctx, b) }
	}
	var ratios, cpuRatios, drainRatios []float64
	for round := 1; round <= rounds; round++ {
		ours := func() (bench.Result, error) { return runRelay(ctx, o) }
		if binary != "" {
			ours = func() (bench.Result, error) { return runBinary(ctx, binary, o, stagger) }
		}
		res, ourCPU, err := measured(ours)
		if err != nil {
			return fmt.Errorf("round %d: outbox-relay: %w", round, err)
		}
		ref, refCPU, err := measured(baseline)
		if err != nil {
			return fmt.Errorf("round %d: %s: %w", round, baselineName, err)
		}
		// The binary's drain, from exec until the table is empty, against
		// refloop's: its run less a run of its preload alone.
		drain := ""
		if ourDrain, ok := res.Extra[bench.ExtraPostgresCPU].(float64); ok && binary != "" && baselineName == "refloop" && pg != nil {
			pre, preloadCPU, err := measured(func() (bench.Result, error) { return runRefloopPreload(ctx, refloop, o) })
			if err != nil {
				return fmt.Errorf("round %d: refloop preload: %w", round, err)
			}
			if refDrain := refCPU - preloadCPU; refDrain > 0 {
				drainRatios = append(drainRatios, ourDrain/refDrain)
				poll, _ := res.Extra[bench.ExtraPollPostgresCPU].(float64)
				drain = fmt.Sprintf(" | drain %.2f s vs %.2f s (%.2f×; the benchmark's poll of the table, %.2f s, left out)", ourDrain, refDrain, ourDrain/refDrain, poll)
			}
			// The processes' own CPU over the drain, on the same cores:
			// the relay's from exec to exit, refloop's run less its
			// preload alone.
			relayCPU, ok1 := res.Extra[bench.ExtraRelayCPU].(float64)
			refRun, ok2 := ref.Extra[extraProcessCPU].(float64)
			refPre, ok3 := pre.Extra[extraProcessCPU].(float64)
			if ok1 && ok2 && ok3 {
				drain += fmt.Sprintf(" | process CPU %.2f s vs %.2f s", relayCPU, refRun-refPre)
			}
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
		r := ratio(o.Mode, res, ref)
		ratios = append(ratios, r)
		cpu := ""
		if pg != nil && refCPU > 0 {
			cpuRatios = append(cpuRatios, ourCPU/refCPU)
			cpu = fmt.Sprintf(" | PostgreSQL CPU per 100k %.2f s vs %.2f s (%.2f×)", ourCPU, refCPU, ourCPU/refCPU)
		}
		fmt.Fprintf(w, "round %d: %s %s | %s %s | ratio %.2f%s%s\n", round, relayName(o), summary(res), baselineName, summary(ref), r, cpu, drain)
	}
	fmt.Fprintf(w, "median ratio (%s / %s, %s) over %d rounds: %.2f\n", relayName(o), baselineName, basis(o.Mode), rounds, median(ratios))
	if len(cpuRatios) > 0 {
		span := "whole run with inserts"
		if o.Archived > 0 || o.NotDue > 0 {
			span = "drain"
		}
		fmt.Fprintf(w, "median PostgreSQL CPU ratio (%s / %s, %s, lower is better): %.2f\n", relayName(o), baselineName, span, median(cpuRatios))
	}
	if len(drainRatios) > 0 {
		fmt.Fprintf(w, "median PostgreSQL CPU ratio (%s / %s, drain: from exec until empty, and refloop's run less its preload alone, lower is better): %.2f\n", relayName(o), baselineName, median(drainRatios))
	}
	return nil
}

// relayName names the relays of o: outbox-relay, with their mode and
// number when they are not one relay in the default mode.
func relayName(o bench.Options) string {
	mode := bench.DeliveryMode(o.Relay)
	switch {
	case o.Replicas > 1:
		return fmt.Sprintf("outbox-relay (%s, %d replicas)", mode, o.Replicas)
	case mode != outbox.ModeUnordered:
		return "outbox-relay (" + string(mode) + ")"
	}
	return "outbox-relay"
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

// ratio is how much better a did than b, above 1 when a is better: its
// events/s over b's in backlog mode, b's p99 over its own in steady mode.
func ratio(mode string, a, b bench.Result) float64 {
	if mode == "steady" && a.P99ms != nil && b.P99ms != nil {
		return *b.P99ms / *a.P99ms
	}
	return a.EventsPerSec / b.EventsPerSec
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
	if cpu, ok := r.Extra[bench.ExtraRelayCPU].(float64); ok {
		s += fmt.Sprintf(", relay CPU %.2f s per 100k", cpu)
	}
	if rss, ok := r.Extra[extraPeakRSS].(float64); ok {
		s += fmt.Sprintf(", peak RSS %.0f MB", rss)
	}
	switch n := r.Extra[bench.ExtraOutOfOrder].(type) {
	case int64:
		s += fmt.Sprintf(", %d out of key order", n)
	case float64:
		s += fmt.Sprintf(", %.0f out of key order", n)
	}
	if first, ok := r.Extra["first_delivery_ms"].(float64); ok {
		s += fmt.Sprintf(", first after %.0f ms", first)
	}
	if shared, ok := r.Extra[bench.ExtraBucketsShared].(float64); ok {
		s += fmt.Sprintf(", buckets shared after %.0f ms", shared)
	} else if r.DeliveryMode == outbox.ModePartitioned {
		s += ", buckets not shared before the end"
	}
	return s
}

// settingsFlag collects NAME=value settings from a repeated flag.
type settingsFlag []string

// String returns the settings, comma-separated.
func (s *settingsFlag) String() string { return strings.Join(*s, ",") }

// Set adds one NAME=value setting.
func (s *settingsFlag) Set(v string) error {
	if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
		return fmt.Errorf("%q is not NAME=value", v)
	}
	*s = append(*s, v)
	return nil
}
