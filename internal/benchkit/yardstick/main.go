package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// config is a run's settings, one per flag.
type config struct {
	N             int           // -n: rows
	PayloadBytes  int           // -payload: bytes per payload
	Batch         int           // -batch: rows per claim
	Workers       int           // -workers: claim loops; 0 loads a backlog without draining it
	Mode          string        // -mode: backlog or steady
	Burst         bool          // -burst: backlog rows due at one timestamp
	Rate          float64       // -rate: steady rows per second
	Producers     int           // -producers: steady producer connections
	ProducerBatch int           // -producer-batch: rows per steady transaction
	DSN           string        // -dsn
	NatsURL       string        // -nats
	Schema        string        // -schema: where the tables are made
	Poll          time.Duration // -poll: a worker's wait after an empty claim
	Lease         time.Duration // -lease: the lease a claim records
	Timeout       time.Duration // -timeout: the whole run's limit
}

// validate reports the first setting out of range, naming its flag.
func (c config) validate() error {
	switch {
	case c.Mode != "backlog" && c.Mode != "steady":
		return fmt.Errorf("-mode %q: want backlog or steady", c.Mode)
	case c.N < 1:
		return fmt.Errorf("-n %d: want at least 1", c.N)
	case c.PayloadBytes < 0:
		return fmt.Errorf("-payload %d: want 0 or more", c.PayloadBytes)
	case c.Batch < 1:
		return fmt.Errorf("-batch %d: want at least 1", c.Batch)
	case c.Workers < 0 || c.Workers > 256:
		return fmt.Errorf("-workers %d: want 0 to 256", c.Workers)
	case c.Mode == "steady" && c.Workers < 1:
		return errors.New("-workers 0 loads a backlog without draining it: -mode steady needs a worker")
	case c.Burst && c.Mode != "backlog":
		return errors.New("-burst shapes the backlog: it needs -mode backlog")
	case c.Mode == "steady" && !(c.Rate > 0):
		return fmt.Errorf("-rate %g: want more than 0 rows a second", c.Rate)
	case c.Producers < 1 || c.Producers > 256:
		return fmt.Errorf("-producers %d: want 1 to 256", c.Producers)
	case c.ProducerBatch < 1:
		return fmt.Errorf("-producer-batch %d: want at least 1", c.ProducerBatch)
	case c.DSN == "":
		return errors.New("-dsn is empty: give the database (or set DATABASE_URL)")
	case c.Schema == "":
		return errors.New("-schema is empty")
	case c.Poll <= 0 || c.Lease <= 0 || c.Timeout <= 0:
		return errors.New("-poll, -lease and -timeout must be positive")
	}
	return nil
}

func main() {
	cfg := config{}
	fs := flag.NewFlagSet("yardstick", flag.ExitOnError)
	fs.IntVar(&cfg.N, "n", 100000, "rows")
	fs.IntVar(&cfg.PayloadBytes, "payload", 256, "payload size in bytes")
	fs.IntVar(&cfg.Batch, "batch", 1000, "rows per claim")
	fs.IntVar(&cfg.Workers, "workers", 2, "claim loops, each with its own connection (0: load the backlog, drain nothing)")
	fs.StringVar(&cfg.Mode, "mode", "backlog", "backlog (drain a preloaded backlog) | steady (commit -> ack latency at -rate)")
	fs.BoolVar(&cfg.Burst, "burst", false, "backlog: every row due at one timestamp (else one microsecond apart)")
	fs.Float64Var(&cfg.Rate, "rate", 2000, "steady: rows per second")
	fs.IntVar(&cfg.Producers, "producers", 2, "steady: producer connections")
	fs.IntVar(&cfg.ProducerBatch, "producer-batch", 1, "steady: rows per producer transaction, in one statement")
	fs.StringVar(&cfg.DSN, "dsn", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)")
	fs.StringVar(&cfg.NatsURL, "nats", envOr("NATS_URL", nats.DefaultURL), "NATS server with JetStream (default $NATS_URL, else "+nats.DefaultURL+")")
	fs.StringVar(&cfg.Schema, "schema", "public", "schema of the tables outbox and outbox_archive (dropped and recreated when they carry the yardstick's marker)")
	fs.DurationVar(&cfg.Poll, "poll", 5*time.Millisecond, "a worker's wait after an empty claim")
	fs.DurationVar(&cfg.Lease, "lease", 30*time.Second, "the lease a claim records (nothing rescues an expired one)")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "limit of the whole run")
	_ = fs.Parse(os.Args[1:])
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "yardstick:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	res, err := run(ctx, cfg)
	cancel()
	stop()
	if err != nil {
		writeError(os.Stdout, err)
		os.Exit(1)
	}
	if err := res.write(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "yardstick:", err)
		os.Exit(1)
	}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// run performs one measurement.
func run(ctx context.Context, cfg config) (*result, error) {
	res := &result{
		Name: "yardstick", Mode: cfg.Mode, Batch: cfg.Batch, Workers: cfg.Workers, PayloadBytes: cfg.PayloadBytes,
		GOMAXPROCS: runtime.GOMAXPROCS(0), StartedAt: time.Now().UTC().Format(time.RFC3339), Extra: map[string]any{},
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("-dsn: %w", err)
	}
	pcfg.MaxConns = int32(cfg.Workers + cfg.Producers + 1)
	pcfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{cfg.Schema}.Sanitize()
	pcfg.ConnConfig.RuntimeParams["application_name"] = "yardstick"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	defer pool.Close()
	nc, err := nats.Connect(cfg.NatsURL, nats.Name("yardstick"))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	// Room for every row the workers can have in flight at once.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(cfg.Workers*cfg.Batch, 1)))
	if err != nil {
		return nil, err
	}
	if err := resetTables(ctx, pool, cfg.Schema); err != nil {
		return nil, err
	}
	if err := resetStream(ctx, js); err != nil {
		return nil, err
	}

	lat := newLatencies(cfg.N)
	var t tally
	switch cfg.Mode {
	case "backlog":
		t0 := time.Now()
		if err := preload(ctx, pool, cfg); err != nil {
			return nil, fmt.Errorf("preload: %w", err)
		}
		if _, err := pool.Exec(ctx, "ANALYZE outbox"); err != nil {
			return nil, err
		}
		res.InsertSeconds = round(time.Since(t0).Seconds(), 4)
		start := time.Now()
		if err := drain(ctx, pool, js, cfg, lat, &t, nil); err != nil {
			return nil, err
		}
		res.setThroughput(int(t.delivered.Load()), time.Since(start))
		res.Extra["burst"] = cfg.Burst
	case "steady":
		start := time.Now()
		produced := func(ctx context.Context) error {
			if err := produce(ctx, pool, cfg, lat); err != nil {
				return fmt.Errorf("produce: %w", err)
			}
			return nil
		}
		if err := drain(ctx, pool, js, cfg, lat, &t, produced); err != nil {
			return nil, err
		}
		res.setThroughput(int(t.delivered.Load()), time.Since(start))
		p50, p99, worst, n := lat.percentiles()
		if n > 0 {
			res.P50ms, res.P99ms, res.MaxMs = &p50, &p99, &worst
			res.LatencyBasis = "producer commit -> JetStream ack"
		}
		res.Extra["latency_samples"] = n
		res.Extra["target_rate"] = cfg.Rate
		res.Extra["producers"], res.Extra["producer_batch"] = cfg.Producers, cfg.ProducerBatch
	}
	res.Extra["claims"] = t.claims.Load()

	var left, archived int64
	if err := pool.QueryRow(ctx, queryTablesCount).Scan(&left, &archived); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	msgs, err := streamMessages(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	res.Extra["outbox_left"], res.Extra["archived"], res.Extra["stream_msgs"] = left, archived, msgs
	res.Verified = left == 0 && archived == int64(cfg.N) && msgs == uint64(cfg.N) && res.Events == cfg.N
	return res, nil
}

// drain runs cfg.Workers workers, each on a connection of its own, and
// returns when all have ended or one failed (then it stops the others).
// Without produce, the workers end when a claim comes back empty; with
// it, produce runs beside them and they end once cfg.N rows are
// delivered.
func drain(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, cfg config, lat *latencies, t *tally, produce func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers+1)
	fail := func(err error) {
		if err != nil {
			errs <- err
			cancel()
		}
	}
	workers := make([]*worker, 0, cfg.Workers)
	defer func() {
		for _, w := range workers {
			w.conn.Release()
		}
	}()
	for i := range cfg.Workers {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("acquire a worker's connection: %w", err)
		}
		workers = append(workers, &worker{name: fmt.Sprintf("yardstick-%d", i+1), conn: conn, js: js, cfg: cfg, lat: lat, tally: t})
	}
	for _, w := range workers {
		wg.Go(func() { fail(w.run(ctx, produce == nil)) })
	}
	if produce != nil {
		wg.Go(func() { fail(produce(ctx)) })
	}
	wg.Wait()
	close(errs)
	// The first failure, not the cancellations it caused in the others.
	if err := <-errs; err != nil {
		return fmt.Errorf("%d of %d rows delivered: %w", t.delivered.Load(), cfg.N, err)
	}
	return nil
}
