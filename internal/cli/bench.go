package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/internal/gctune"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

func cmdBench(ctx context.Context, inv *Invocation, args []string) error {
	fs := newFlagSet("bench [flags]",
		"Measure the relay with its default settings against DATABASE_URL and NATS_URL: the drain rate of a\n"+
			"preloaded backlog (--mode backlog) or insert-to-ack latency at a steady rate (--mode steady).\n"+
			"It works in a scratch schema (--schema) and the JetStream stream OUTBOX_BENCH, both of which it creates\n"+
			"with a marker and drops on the next run; it refuses a schema or stream it did not create.\n"+
			"--replicas N runs N relays in this process, each with its own pool and NATS connection, started together;\n"+
			"the measurement includes the time they take to share the work (in --partitioned mode, the buckets).\n"+
			"Prints one JSON line: events/s, commit-to-ack p50/p99/max (steady), claim and settle p50/p99, CPU seconds\n"+
			"per 100k events of the relay and of PostgreSQL (when the server runs on this machine), peak RSS, and\n"+
			"the shape of the run (delivery_mode, replicas).", inv.Stderr)
	n := fs.Int("n", 100000, "number of events")
	payload := fs.Int("payload", 256, "payload size in bytes")
	mode := fs.String("mode", "backlog", "backlog | steady")
	rate := fs.Float64("rate", 2000, "steady mode: producer events per second")
	producers := fs.Int("producers", 2, "steady mode: producer connections")
	rowsPerTx := fs.Int("rows-per-tx", 1, "steady mode: rows per producer transaction, in one INSERT statement")
	archived := fs.Int("archived", 0, "fill the archive and the delivered keys with this many rows of history first")
	chosenKeys := fs.Bool("chosen-keys", false, "backlog mode: give every row an idempotency key of the producer's choosing (looked up and recorded for deduplication)")
	notDue := fs.Int("not-due", 0, "add this many rows due only in a day beside the ones measured")
	keys := fs.Int("keys", 0, "give the rows this many ordering keys, interleaved (0: no keys)")
	ordered := fs.Bool("ordered", false, "run the relay in ordered mode (RELAY_ORDERED=true)")
	partitioned := fs.Bool("partitioned", false, "run the relay in partitioned mode (RELAY_MODE=partitioned); excludes --ordered")
	replicas := fs.Int("replicas", 1, fmt.Sprintf("relays to run at once, 1 to %d, each with its own pool and NATS connection", bench.MaxReplicas))
	burst := fs.Bool("burst", false, "backlog mode: give every row the same available_at (a second before the load), as a batch all due at midnight would")
	notify := fs.Bool("notify", false, "wake the relay on inserts (RELAY_NOTIFY=true)")
	schema := fs.String("schema", "outbox_bench", "scratch schema (created by the benchmark, dropped by its next run)")
	batch := fs.Int("batch", 0, "RELAY_BATCH_SIZE to use (0 = default)")
	inFlight := fs.Int("max-in-flight", 0, "RELAY_MAX_IN_FLIGHT to use (0 = default)")
	inFlightBytes := fs.Int64("max-in-flight-bytes", 0, "RELAY_MAX_IN_FLIGHT_BYTES to use (0 = default)")
	label := fs.String("label", "", "free text copied into the result")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit for the whole run")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *ordered && *partitioned {
		return usageError{errors.New("--ordered and --partitioned exclude each other: a schema runs one mode")}
	}
	shape := bench.Options{Mode: *mode, Replicas: *replicas, Burst: *burst, Relay: relay.Config{Mode: benchMode(*ordered, *partitioned)}}
	if err := shape.Validate(); err != nil || *replicas < 1 {
		return usageError{cmp.Or(err, fmt.Errorf("--replicas %d: want 1 to %d", *replicas, bench.MaxReplicas))}
	}
	o, err := benchOptions(inv, *schema)
	if err != nil {
		return err
	}
	o.Mode, o.N, o.PayloadBytes, o.Rate, o.Label, o.Timeout = *mode, *n, *payload, *rate, *label, *timeout
	o.Keys, o.Producers, o.RowsPerTx, o.Archived, o.NotDue, o.ChosenKeys = *keys, *producers, *rowsPerTx, *archived, *notDue, *chosenKeys
	o.Replicas, o.Burst = *replicas, *burst
	if isTerminal(inv.Stderr) {
		o.Progress = inv.Stderr // a progress line on a terminal, never in a log file
	}
	gctune.Apply(inv.Environ, o.Logger)
	o.Relay = relay.Config{BatchSize: *batch, MaxInFlight: *inFlight, MaxInFlightBytes: *inFlightBytes, Mode: shape.Relay.Mode, Notify: *notify}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return bench.Run(ctx, o, inv.Stdout)
}

// benchOptions checks the environment a benchmark needs and the scratch
// schema it was given.
func benchOptions(inv *Invocation, schema string) (bench.Options, error) {
	c, err := loadConfig(inv.Environ)
	if err != nil {
		return bench.Options{}, err
	}
	if err := c.requireDatabase(); err != nil {
		return bench.Options{}, err
	}
	nats := sinkEnvOf[natsEnv](&c)
	if nats.URL == "" {
		return bench.Options{}, &configError{Var: "NATS_URL", Allowed: "the URL of a NATS server with JetStream"}
	}
	if schema == c.Schema {
		return bench.Options{}, usageError{fmt.Errorf("--schema %s is the relay's schema (RELAY_SCHEMA): the benchmark drops its schema, so give it another", schema)}
	}
	s := settingsOf(&c, inv.Version)
	return bench.Options{DatabaseURL: c.DatabaseURL, NatsURL: nats.URL, Schema: schema, Logger: newLogger(s, inv.Stderr)}, nil
}

// benchMode is the mode the bench command's --ordered and --partitioned ask
// for (cmdBench refuses both at once).
func benchMode(ordered, partitioned bool) outbox.Mode {
	switch {
	case ordered:
		return outbox.ModeOrdered
	case partitioned:
		return outbox.ModePartitioned
	}
	return outbox.ModeUnordered
}
