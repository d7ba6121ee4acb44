package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
)

// replica is one relay of a run with what a deployment of its own would
// have: a pool of relay.PoolSize connections, a NATS connection, its
// metrics and an id of its own (bench-1, bench-2, ...).
type replica struct {
	id      string
	relay   *relay.Relay
	metrics *relay.Metrics
	pool    *pgxpool.Pool
	sink    *natssink.Sink
}

// replicas are the relays of a run, all with the same configuration.
type replicas []*replica

// newReplicas opens o.Replicas relays (at least one) configured by
// o.Relay on o's scratch schema, each delivering through its own NATS
// connection wrapped by timingSink. Close them with close once they have
// stopped.
func newReplicas(ctx context.Context, o Options, lat *latencies) (replicas, error) {
	var rs replicas
	for i := range max(o.Replicas, 1) {
		r, err := newReplica(ctx, o, "bench-"+strconv.Itoa(i+1), lat)
		if err != nil {
			rs.close()
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func newReplica(ctx context.Context, o Options, id string, lat *latencies) (*replica, error) {
	// The pool the binary gives the relay (pgxpool's default, 4 on two
	// cores, makes claims wait for connections).
	pc, err := pgxpool.ParseConfig(o.DatabaseURL)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = relay.PoolSize
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	sink, err := natssink.New(natssink.Config{URL: o.NatsURL, JetStream: true, Logger: o.Logger})
	if err != nil {
		pool.Close()
		return nil, err
	}
	cfg := o.Relay
	cfg.ID = id
	cfg.Schema = o.Schema
	cfg.Sinks = map[string]sinks.Sink{"nats": &timingSink{next: sink, lat: lat, steady: o.Mode == "steady"}}
	cfg.Logger = o.Logger
	cfg.Metrics = relay.NewMetrics()
	r, err := relay.New(pool, cfg)
	if err != nil {
		_ = sink.Close()
		pool.Close()
		return nil, err
	}
	return &replica{id: id, relay: r, metrics: cfg.Metrics, pool: pool, sink: sink}, nil
}

// close closes the pools and NATS connections of relays that have stopped.
func (rs replicas) close() {
	for _, r := range rs {
		_ = r.sink.Close()
		r.pool.Close()
	}
}

// delivered returns the messages each relay has delivered and settled.
func (rs replicas) delivered() (total int, each []int) {
	each = make([]int, len(rs))
	for i, r := range rs {
		each[i] = int(counterValue(r.metrics.Messages.WithLabelValues("nats", "delivered")))
		total += each[i]
	}
	return total, each
}

// waitClaiming waits until every relay has run a claim, or returns the
// error of one that stopped. A relay's first claim comes after its
// registration, its pool's first connections and its statements' first
// plans; producers that began with the relays had their first 100 ms of
// rows (659 of 1,020 at 10k rows/s) wait that long, which alone set a
// steady run's p99. refloop's workers, likewise, hold their connections
// before its producers begin.
func (rs replicas) waitClaiming(ctx context.Context, run *running) error {
	for {
		claimed := 0
		for _, r := range rs {
			if histogramStats(r.metrics.ClaimDuration).count > 0 {
				claimed++
			}
		}
		if claimed == len(rs) {
			return nil
		}
		if err := run.early(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("waiting for the relays' first claims (%d of %d claimed): %w", claimed, len(rs), ctx.Err()), run.early())
		case <-time.After(time.Millisecond):
		}
	}
}

// histograms returns the collectors of one histogram of every relay, for
// histogramStats to merge.
func (rs replicas) histograms(of func(*relay.Metrics) prometheus.Collector) []prometheus.Collector {
	cs := make([]prometheus.Collector, len(rs))
	for i, r := range rs {
		cs[i] = of(r.metrics)
	}
	return cs
}

// start runs every relay at once, until ctx ends.
func (rs replicas) start(ctx context.Context) *running {
	run := &running{ended: make(chan ended, len(rs)), left: len(rs)}
	for _, r := range rs {
		go func() { run.ended <- ended{id: r.id, err: r.relay.Run(ctx)} }()
	}
	return run
}

// running follows the Run calls of a run's relays. Its methods are for
// one goroutine.
type running struct {
	ended chan ended
	left  int // Run calls not yet seen ending
	errs  []error
}

type ended struct {
	id  string
	err error
}

// early returns an error when a relay stopped before it was told to (its
// Run returned while its context lasted).
func (run *running) early() error {
	select {
	case e := <-run.ended:
		run.left--
		if e.err == nil {
			e.err = errors.New("without an error")
		}
		err := fmt.Errorf("relay %s stopped before the run ended: %w", e.id, e.err)
		run.errs = append(run.errs, err)
		return err
	default:
		return nil
	}
}

// wait waits for every relay to stop (cancel the context given to start
// first) and returns the errors their Run calls returned, but for the
// cancellation itself: a relay still registering when the run ends (the
// others drained the backlog first) returns it.
func (run *running) wait() error {
	for ; run.left > 0; run.left-- {
		if e := <-run.ended; e.err != nil && !errors.Is(e.err, context.Canceled) {
			run.errs = append(run.errs, fmt.Errorf("relay %s: %w", e.id, e.err))
		}
	}
	return errors.Join(run.errs...)
}
