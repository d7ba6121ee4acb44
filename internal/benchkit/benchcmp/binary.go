package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// extraPeakRSS is the key of the peak RSS in MB in a result's Extra.
const extraPeakRSS = "peak_rss_mb"

// runBinary measures the shipped binary as users run it: the backlog of o
// is preloaded, then o.Replicas processes of bin (at least one) start one
// after another, stagger apart, each with its defaults (only the database,
// NATS, the scratch schema, its RELAY_ID and, for ordered and partitioned
// mode, RELAY_MODE set; the backlog's rows carry o.Keys keys in
// o.KeyOrder, as the in-process benchmark's do), and the time from the first exec until the table is
// empty is the drain. The relays are then stopped with SIGTERM and the run
// verified.
func runBinary(ctx context.Context, bin string, o bench.Options, stagger time.Duration) (bench.Result, error) {
	if err := bench.PrepareBacklog(ctx, o); err != nil {
		return bench.Result{}, err
	}
	pool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return bench.Result{}, err
	}
	defer pool.Close()
	var cmds []*exec.Cmd
	// exited receives each relay's exit; waited counts those received.
	exited := make(chan error, max(o.Replicas, 1))
	waited := 0
	stop := func() error {
		var first error
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		for ; waited < len(cmds); waited++ {
			if err := <-exited; err != nil && first == nil {
				first = fmt.Errorf("%s run: %w", bin, err)
			}
		}
		return first
	}
	// early is the error of a relay that exited before the table drained
	// (a refused configuration, a schema newer than the binary): the run
	// fails rather than wait for a drain that no relay makes.
	early := func(err error) error {
		waited++
		return fmt.Errorf("%s run exited before the table drained: %v", bin, cmp.Or(err, errors.New("exit status 0")))
	}
	// PostgreSQL's CPU over the drain, from the first exec until the table
	// is empty, when the server runs on this machine.
	pg, pgErr := bench.NewPostgresCPU(ctx, pool)
	var pgStart time.Duration
	if pgErr == nil {
		pgStart, pgErr = pg.Used()
	}
	began := time.Now()
	// In partitioned mode, when every bucket had an owner and when every
	// process held its share, from the first exec.
	var watch *bench.BucketWatch
	if o.Relay.Mode == outbox.ModePartitioned {
		watch = bench.WatchBuckets(ctx, pool, o.Schema, max(o.Replicas, 1), began)
		// Stops it on the returns of a failed run too (End may run twice).
		defer func() { _ = watch.End(map[string]any{}) }()
	}
	drained := make(chan error, 1)
	var elapsed, pollCPU time.Duration
	// The poll holds a connection of the pool until it ends: it ends when
	// the run does, before the pool closes (which waits for it).
	pollCtx, endPoll := context.WithCancel(ctx)
	defer endPoll()
starting:
	for i := range max(o.Replicas, 1) {
		if i > 0 {
			select {
			case err := <-drained: // drained before every relay started
				drained <- err
				break starting
			case err := <-exited:
				return bench.Result{}, errors.Join(early(err), stop())
			case <-time.After(stagger):
			}
		}
		cmd := exec.CommandContext(ctx, bin, "run")
		cmd.Env = append(os.Environ(),
			"DATABASE_URL="+o.DatabaseURL, "NATS_URL="+o.NatsURL, "RELAY_SCHEMA="+o.Schema,
			"RELAY_HTTP_ADDR=", "LOG_LEVEL=warn", fmt.Sprintf("RELAY_ID=bench-%d", i+1))
		if o.Relay.Mode != "" {
			cmd.Env = append(cmd.Env, "RELAY_MODE="+string(o.Relay.Mode))
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return bench.Result{}, errors.Join(err, stop())
		}
		cmds = append(cmds, cmd)
		go func() { exited <- cmd.Wait() }()
		if i == 0 {
			go func() {
				var err error
				elapsed, pollCPU, err = untilDrained(pollCtx, pool, o, began)
				drained <- err
			}()
		}
	}
	var drainErr error
	select {
	case drainErr = <-drained:
	case err := <-exited:
		drainErr = early(err)
	}
	if drainErr != nil {
		// The poll may still run (it ends with the run): elapsed and
		// pollCPU are read only after it reported.
		return bench.Result{}, errors.Join(drainErr, stop())
	}
	extra := map[string]any{}
	if pgErr == nil {
		if end, err := pg.Used(); err == nil {
			extra[bench.ExtraPostgresCPU] = (end - pgStart - pollCPU).Seconds() * 100000 / float64(o.N)
			extra[bench.ExtraPollPostgresCPU] = pollCPU.Seconds() * 100000 / float64(o.N)
		}
	}
	if err := stop(); err != nil {
		return bench.Result{}, err
	}
	if watch != nil {
		if err := watch.End(extra); err != nil {
			return bench.Result{}, err
		}
	}
	// The relays' own CPU, from exec to exit, per 100k events, and the
	// largest peak RSS among them, in MB (as the in-process benchmark
	// reports its process's).
	var cpu time.Duration
	var maxRSS int64
	for _, cmd := range cmds {
		cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			maxRSS = max(maxRSS, ru.Maxrss)
		}
	}
	extra[bench.ExtraRelayCPU] = cpu.Seconds() * 100000 / float64(o.N)
	extra[extraPeakRSS] = float64(maxRSS) / 1024
	ok, err := bench.Verify(ctx, o, extra)
	if err != nil {
		return bench.Result{}, err
	}
	return bench.Result{
		Name: "outbox-relay (binary)", Events: o.N, Seconds: elapsed.Seconds(),
		EventsPerSec: float64(o.N) / elapsed.Seconds(), Mode: "backlog", Verified: ok,
		Replicas: max(o.Replicas, 1), DeliveryMode: bench.DeliveryMode(o.Relay), Extra: extra,
		Keys: o.Keys, KeyOrder: bench.KeyOrderOf(o),
	}, nil
}

// untilDrained polls until the rows of o's backlog have left the table and
// returns the time since began, and the CPU the polling backend used
// meanwhile (0 when the server is not on this machine): the benchmark's
// own load on PostgreSQL, which runBinary does not count as the relay's.
// Rows due only later (o.NotDue) stay. It reads every generation of the
// hot table (messages_all): a rotation during a long drain leaves the rows
// not yet delivered in a draining one.
func untilDrained(ctx context.Context, pool *pgxpool.Pool, o bench.Options, began time.Time) (time.Duration, time.Duration, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Release()
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, 0, err
	}
	cpuStart, cpuErr := bench.ProcessCPU(backend)
	query := "SELECT count(*) FROM (SELECT 1 FROM " + pgx.Identifier{o.Schema, "messages_all"}.Sanitize() +
		" WHERE available_at <= now() LIMIT 1) AS due"
	for {
		var due int
		if err := conn.QueryRow(ctx, query).Scan(&due); err != nil {
			return 0, 0, err
		}
		if due == 0 {
			elapsed := time.Since(began)
			var used time.Duration
			if cpuEnd, err := bench.ProcessCPU(backend); err == nil && cpuErr == nil {
				used = cpuEnd - cpuStart
			}
			return elapsed, used, nil
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
}
