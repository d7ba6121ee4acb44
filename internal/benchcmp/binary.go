package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/bench"
)

// runBinary measures the shipped binary as users run it: the backlog of o
// is preloaded, then bin runs with its defaults (only the database, NATS
// and the scratch schema set) and the time from exec until the table is
// empty is the drain. The relay is then stopped with SIGTERM and the run
// verified.
func runBinary(ctx context.Context, bin string, o bench.Options) (bench.Result, error) {
	if err := bench.PrepareBacklog(ctx, o); err != nil {
		return bench.Result{}, err
	}
	pool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return bench.Result{}, err
	}
	defer pool.Close()
	cmd := exec.CommandContext(ctx, bin, "run")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+o.DatabaseURL, "NATS_URL="+o.NatsURL, "RELAY_SCHEMA="+o.Schema,
		"RELAY_HTTP_ADDR=", "LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return bench.Result{}, err
	}
	elapsed, drainErr := untilDrained(ctx, pool, o, began)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		return bench.Result{}, fmt.Errorf("%s run: %w", bin, err)
	}
	if drainErr != nil {
		return bench.Result{}, drainErr
	}
	ok, err := bench.Verify(ctx, o)
	if err != nil {
		return bench.Result{}, err
	}
	return bench.Result{
		Name: "outbox-relay (binary)", Events: o.N, Seconds: elapsed.Seconds(),
		EventsPerSec: float64(o.N) / elapsed.Seconds(), Mode: "backlog", Verified: ok,
		Extra: map[string]any{},
	}, nil
}

// untilDrained polls until the rows of o's backlog have left the table and
// returns the time since began. Rows due only later (o.NotDue) stay.
func untilDrained(ctx context.Context, pool *pgxpool.Pool, o bench.Options, began time.Time) (time.Duration, error) {
	query := "SELECT count(*) FROM (SELECT 1 FROM " + pgx.Identifier{o.Schema, "messages"}.Sanitize() +
		" WHERE available_at <= now() LIMIT 1) AS due"
	for {
		var due int
		if err := pool.QueryRow(ctx, query).Scan(&due); err != nil {
			return 0, err
		}
		if due == 0 {
			return time.Since(began), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
}
