// Package bench measures the relay on a real PostgreSQL and NATS server: the
// drain rate of a preloaded backlog, or commit-to-ack latency under a steady
// producer. It prints one JSON line shaped like ../shared/refloop's, so the
// two can be compared run by run.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
)

// Stream and subjects the benchmark publishes to.
const (
	Stream  = "OUTBOX_BENCH"
	Subject = "bench.outbox.events"
)

// Options configure a run.
type Options struct {
	DatabaseURL string
	NatsURL     string
	// Schema is the scratch schema: created with a marker, and dropped and
	// recreated by later runs only while it carries the marker.
	Schema       string
	Mode         string // backlog or steady
	N            int
	PayloadBytes int
	// Rate is the producer's events per second in steady mode.
	Rate float64
	// Keys, when set, gives the rows that many ordering keys, interleaved
	// (row i has key i mod Keys), so that each key has N/Keys events.
	Keys int
	// Relay is the relay configuration; zero values are the defaults, which
	// is what the benchmark is for.
	Relay   relay.Config
	Timeout time.Duration
	Label   string
	Logger  *slog.Logger
}

// Result is the JSON line a run prints.
type Result struct {
	Name          string         `json:"name"`
	Events        int            `json:"events"`
	Seconds       float64        `json:"seconds"`
	EventsPerSec  float64        `json:"events_per_sec"`
	P50ms         *float64       `json:"p50_ms"`
	P99ms         *float64       `json:"p99_ms"`
	Mode          string         `json:"mode"`
	Ordered       bool           `json:"ordered"`
	Keys          int            `json:"keys,omitempty"`
	Batch         int            `json:"batch"`
	PayloadBytes  int            `json:"payload_bytes"`
	InsertSeconds float64        `json:"insert_seconds,omitempty"`
	LatencyBasis  string         `json:"latency_basis,omitempty"`
	Verified      bool           `json:"verified"`
	Label         string         `json:"label,omitempty"`
	GOMAXPROCS    int            `json:"gomaxprocs"`
	StartedAt     string         `json:"started_at"`
	Extra         map[string]any `json:"extra,omitempty"`
}

// Run performs one measurement and writes its Result to w.
func Run(ctx context.Context, o Options, w io.Writer) error {
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	res := Result{
		Name: "outbox-relay", Mode: o.Mode, PayloadBytes: o.PayloadBytes, Label: o.Label,
		GOMAXPROCS: runtime.GOMAXPROCS(0), StartedAt: time.Now().UTC().Format(time.RFC3339),
		Extra: map[string]any{},
	}

	pool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer pool.Close()
	if err := resetSchema(ctx, pool, o.Schema); err != nil {
		return err
	}
	if err := resetStream(ctx, o.NatsURL); err != nil {
		return err
	}
	sink, err := natssink.New(natssink.Config{URL: o.NatsURL, JetStream: true, Logger: o.Logger})
	if err != nil {
		return err
	}
	defer sink.Close()

	lat := newLatencies(o.N)
	cfg := o.Relay
	cfg.Schema = o.Schema
	cfg.Sinks = map[string]sinks.Sink{"nats": &timingSink{next: sink, lat: lat, steady: o.Mode == "steady"}}
	cfg.Logger = o.Logger
	cfg.Metrics = relay.NewMetrics()
	res.Ordered, res.Keys = cfg.Ordered, o.Keys
	res.Batch = cfg.BatchSize
	if res.Batch == 0 {
		res.Batch = relay.BatchSizeDefault
	}
	relayPool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return err
	}
	defer relayPool.Close()
	r, err := relay.New(relayPool, cfg)
	if err != nil {
		return err
	}
	delivered := func() int {
		return int(counterValue(cfg.Metrics.Messages.WithLabelValues("nats", "delivered")))
	}

	var start time.Time
	runCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	switch o.Mode {
	case "backlog":
		t0 := time.Now()
		if err := preload(ctx, pool, o); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
		res.InsertSeconds = round(time.Since(t0).Seconds(), 4)
		if _, err := pool.Exec(ctx, "ANALYZE "+outbox.QuoteSchema(o.Schema)+".messages"); err != nil {
			return err
		}
		start = time.Now()
		go func() { relayDone <- r.Run(runCtx) }()
	case "steady":
		start = time.Now()
		go func() { relayDone <- r.Run(runCtx) }()
		if err := produce(ctx, pool, o, lat); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	default:
		return fmt.Errorf("unknown mode %q: want backlog or steady", o.Mode)
	}
	for delivered() < o.N {
		if ctx.Err() != nil {
			return fmt.Errorf("only %d of %d delivered: %w", delivered(), o.N, ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	stopRelay()
	if err := <-relayDone; err != nil {
		return err
	}
	res.Events = delivered()
	res.Seconds = round(elapsed.Seconds(), 4)
	res.EventsPerSec = round(float64(res.Events)/elapsed.Seconds(), 1)
	if o.Mode == "steady" {
		p50, p99 := lat.percentiles()
		res.P50ms, res.P99ms = &p50, &p99
		res.LatencyBasis = "producer commit -> JetStream ack"
		res.Extra["target_rate"] = o.Rate
	}

	for name, h := range map[string]prometheus.Collector{
		"claim": cfg.Metrics.ClaimDuration, "settle": cfg.Metrics.SettleDuration,
		"deliver": cfg.Metrics.DeliverDuration,
	} {
		count, mean := histogramStats(h)
		res.Extra[name+"_count"] = count
		res.Extra[name+"_mean_ms"] = round(mean*1000, 3)
	}

	left, archived, err := counts(ctx, pool, o.Schema)
	if err != nil {
		return err
	}
	msgs, err := streamMsgs(ctx, o.NatsURL)
	if err != nil {
		return err
	}
	res.Extra["outbox_left"], res.Extra["archived"], res.Extra["stream_msgs"] = left, archived, msgs
	if rss, ok := peakRSS(); ok {
		res.Extra["peak_rss_mb"] = round(float64(rss)/(1<<20), 1)
	}
	res.Verified = left == 0 && archived == int64(o.N) && msgs == uint64(o.N)
	return json.NewEncoder(w).Encode(res)
}

// timingSink records, in steady mode, when each message was acknowledged.
type timingSink struct {
	next   sinks.Sink
	lat    *latencies
	steady bool
}

func (s *timingSink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := s.next.Deliver(ctx, msgs)
	if s.steady {
		now := time.Now()
		for i, err := range errs {
			if err == nil {
				s.lat.ack(msgs[i].IdempotencyKey, now)
			}
		}
	}
	return errs
}

// Available passes the NATS sink's availability through.
func (s *timingSink) Available() error {
	if a, ok := s.next.(interface{ Available() error }); ok {
		return a.Available()
	}
	return nil
}

// latencies holds, per event (its idempotency key is its sequence number),
// when the producer's commit returned and when the ack came: the same basis
// as refloop's steady mode.
type latencies struct {
	commit, acked []atomic.Int64
}

func newLatencies(n int) *latencies {
	return &latencies{commit: make([]atomic.Int64, n+1), acked: make([]atomic.Int64, n+1)}
}

func (l *latencies) committed(seq int64, t time.Time) {
	if seq >= 0 && int(seq) < len(l.commit) {
		l.commit[seq].Store(t.UnixNano())
	}
}

func (l *latencies) ack(key string, t time.Time) {
	seq, err := strconv.ParseInt(key, 10, 64)
	if err == nil && seq >= 0 && int(seq) < len(l.acked) {
		l.acked[seq].CompareAndSwap(0, t.UnixNano())
	}
}

func (l *latencies) percentiles() (p50, p99 float64) {
	var d []time.Duration
	for i := range l.commit {
		c, a := l.commit[i].Load(), l.acked[i].Load()
		if c != 0 && a != 0 {
			d = append(d, time.Duration(a-c))
		}
	}
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	at := func(p float64) float64 {
		return round(float64(d[int(float64(len(d)-1)*p)])/1e6, 3)
	}
	return at(0.50), at(0.99)
}

func streamMsgs(ctx context.Context, url string) (uint64, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, Stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

func counts(ctx context.Context, pool *pgxpool.Pool, schema string) (left, archived int64, err error) {
	q := outbox.QuoteSchema(schema)
	err = pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+q+".messages), (SELECT count(*) FROM "+q+".archive)").Scan(&left, &archived)
	return left, archived, err
}

// Payload returns a JSON object of exactly size bytes (when size >= 64)
// carrying seq, the same shape refloop sends.
func Payload(seq int64, size int) []byte {
	head := `{"seq":` + strconv.FormatInt(seq, 10) + `,"type":"order.created","tenant":"t-42","pad":"`
	tail := `"}`
	pad := max(size-len(head)-len(tail), 0)
	b := make([]byte, 0, len(head)+pad+len(tail))
	b = append(b, head...)
	for i := range pad {
		b = append(b, byte('a'+(int(seq)+i)%26))
	}
	return append(b, tail...)
}

func headers(seq int64) map[string]string {
	return map[string]string{"event-type": "order.created", "trace-id": strconv.FormatInt(seq, 16)}
}

// preload writes N rows with COPY in one statement.
func preload(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= o.N {
			return nil, nil
		}
		i++
		var key *string
		if o.Keys > 0 {
			k := "key-" + strconv.Itoa(i%o.Keys)
			key = &k
		}
		return []any{Subject, Payload(int64(i), o.PayloadBytes), headers(int64(i)), key}, nil
	})
	n, err := pool.CopyFrom(ctx, pgx.Identifier{o.Schema, "messages"}, []string{"topic", "payload", "headers", "key"}, src)
	if err != nil {
		return err
	}
	if n != int64(o.N) {
		return fmt.Errorf("copied %d rows, want %d", n, o.N)
	}
	return nil
}

// produce inserts N rows, one per transaction, at o.Rate per second from two
// connections, recording when each commit returned. Each row's idempotency
// key is its sequence number.
func produce(ctx context.Context, pool *pgxpool.Pool, o Options, lat *latencies) error {
	const producers = 2
	interval := time.Duration(float64(time.Second) / o.Rate)
	begin := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	sql := "INSERT INTO " + outbox.QuoteSchema(o.Schema) + ".messages (topic, payload, headers, idempotency_key) VALUES ($1, $2, $3::jsonb, $4)"
	for range producers {
		wg.Go(func() {
			for {
				seq := next.Add(1)
				if seq > int64(o.N) {
					return
				}
				if d := time.Until(begin.Add(time.Duration(seq-1) * interval)); d > 0 {
					time.Sleep(d)
				}
				if _, err := pool.Exec(ctx, sql, Subject, Payload(seq, o.PayloadBytes), headers(seq), strconv.FormatInt(seq, 10)); err != nil {
					errs <- err
					return
				}
				lat.committed(seq, time.Now())
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// counterValue reads a counter without the test-only prometheus/testutil.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// histogramStats returns the observation count and mean of a histogram (or
// of every series of a histogram vector).
func histogramStats(c prometheus.Collector) (count uint64, mean float64) {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err == nil && pb.Histogram != nil {
			count += pb.Histogram.GetSampleCount()
			sum += pb.Histogram.GetSampleSum()
		}
	}
	if count > 0 {
		mean = sum / float64(count)
	}
	return count, mean
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// peakRSS returns the process's peak resident set size in bytes (VmHWM in
// /proc/self/status), on Linux.
func peakRSS() (int64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
