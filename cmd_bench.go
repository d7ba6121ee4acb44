package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/relay"
)

func cmdBench(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench [flags]",
		"Measure the relay with its default settings against DATABASE_URL and NATS_URL: the drain rate of a\n"+
			"preloaded backlog (-mode backlog) or insert-to-ack latency at a steady rate (-mode steady).\n"+
			"It drops and recreates the schema given by -schema and the JetStream stream OUTBOX_BENCH.\n"+
			"Prints one JSON line; -compare runs ../shared/refloop alternately and prints ratios (make bench).", stderr)
	n := fs.Int("n", 100000, "number of events")
	payload := fs.Int("payload", 256, "payload size in bytes")
	mode := fs.String("mode", "backlog", "backlog | steady")
	rate := fs.Float64("rate", 2000, "steady mode: producer events per second")
	schema := fs.String("schema", "outbox_bench", "scratch schema (dropped and recreated)")
	batch := fs.Int("batch", 0, "RELAY_BATCH_SIZE to use (0 = default)")
	inFlight := fs.Int("max-in-flight", 0, "RELAY_MAX_IN_FLIGHT to use (0 = default)")
	label := fs.String("label", "", "free text copied into the result")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit for the whole run")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	compare := fs.String("compare", "", "path of a refloop binary (../shared/refloop) to run alternately with the relay, printing ratios")
	rounds := fs.Int("rounds", 5, "with -compare: rounds of each")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(environ)
	if err != nil {
		return err
	}
	if err := c.requireDatabase(); err != nil {
		return err
	}
	if c.NatsURL == "" {
		return &configError{Var: "NATS_URL", Allowed: "the URL of a NATS server with JetStream"}
	}
	if *schema == c.Schema {
		return usageError{fmt.Errorf("-schema %s is the relay's schema (RELAY_SCHEMA): the benchmark drops its schema, so give it another", *schema)}
	}
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
	o := bench.Options{
		DatabaseURL: c.DatabaseURL, NatsURL: c.NatsURL, Schema: *schema, Mode: *mode, N: *n,
		PayloadBytes: *payload, Rate: *rate, Label: *label, Timeout: *timeout,
		Relay:  relay.Config{BatchSize: *batch, MaxInFlight: *inFlight},
		Logger: newLogger(c, stderr),
	}
	if *compare != "" {
		return bench.Compare(ctx, o, *compare, *rounds, stdout)
	}
	return bench.Run(ctx, o, stdout)
}
