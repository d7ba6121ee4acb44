// Package bench measures the relay on a real PostgreSQL and NATS server: the
// drain rate of a preloaded backlog, or commit-to-ack latency under a steady
// producer. It prints one JSON line per run (Result), so that runs can be
// compared with each other and with other relays measured the same way.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
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
	// Rate is the producers' events per second in steady mode, from
	// Producers connections (default 2) inserting RowsPerTx rows per
	// transaction (default 1).
	Rate      float64
	Producers int
	RowsPerTx int
	// Archived, when set, fills the archive and the delivered keys with
	// that many rows delivered over the past six days before the run: a
	// relay with history.
	Archived int
	// ChosenKeys gives every row an idempotency key of the producer's
	// choosing, which the relay looks up among the delivered keys and
	// records; otherwise backlog rows get generated keys (steady rows
	// always carry their sequence number).
	ChosenKeys bool
	// NotDue, when set, adds that many rows due in a day beside the
	// backlog: rows the claims must not slow down for.
	NotDue int
	// Progress, when set, receives a progress line every second.
	Progress io.Writer
	// Keys, when set, gives the backlog's rows that many ordering keys, so
	// that each key has about N/Keys events, in the order KeyOrder says
	// (KeyOf).
	Keys int
	// KeyOrder is how the keys of the backlog's rows follow one another:
	// KeyInterleaved (the default: row i has key i mod Keys, as producers
	// write them) or KeyGrouped (each key's rows consecutive).
	KeyOrder string
	// Burst, in backlog mode, gives every row of the backlog the same
	// available_at, a second before the load (the database's clock), as a
	// batch of renewals all due at midnight would have. Otherwise the rows
	// take the column's default, now() of the loading transaction, which is
	// one shared timestamp too.
	Burst bool
	// Replicas is the number of relays run at once (default 1), each with
	// its own pool of relay.PoolSize connections, its own NATS connection
	// and its own id (bench-1, bench-2, ...), all configured by Relay. They
	// start together; the measurement starts with them, so that it includes
	// the time they take to share the work (in partitioned mode, the
	// buckets). At most MaxReplicas.
	Replicas int
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
	MaxMs         *float64       `json:"max_ms,omitempty"`
	Mode          string         `json:"mode"`
	Ordered       bool           `json:"ordered"`
	DeliveryMode  outbox.Mode    `json:"delivery_mode"`
	Replicas      int            `json:"replicas"`
	Keys          int            `json:"keys,omitempty"`
	KeyOrder      string         `json:"key_order,omitempty"`
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

// The figures a run reports in Result.Extra besides the verification
// counts, so that a deployment can be sized from one line.
const (
	// ExtraPostgresCPU is PostgreSQL's CPU seconds per 100k events over the
	// drain (backlog) or the whole run (steady), or the reason it is
	// unavailable (a server on another machine).
	ExtraPostgresCPU = "pg_cpu_s_per_100k"
	// ExtraPollPostgresCPU is, for the binary's runs (benchcmp -binary),
	// the CPU seconds per 100k events of the backend that polled the table
	// until it was empty: the benchmark's, not the relay's, and taken out
	// of ExtraPostgresCPU (refloop, timing itself, runs no such poll).
	ExtraPollPostgresCPU = "poll_pg_cpu_s_per_100k"
	// ExtraRelayCPU is the benchmark process's CPU seconds per 100k events
	// over the same span: the relay, and in steady mode the producers.
	ExtraRelayCPU = "relay_cpu_s_per_100k"
	// ExtraDeliveriesPerRelay lists, with several replicas, how many
	// messages each delivered (bench-1 first).
	ExtraDeliveriesPerRelay = "deliveries_per_relay"
	// ExtraOutOfOrder is, for keyed rows in ordered and partitioned mode,
	// the number of messages the stream holds after a later row of their
	// key (streamOutOfKeyOrder); a run with any does not verify.
	ExtraOutOfOrder = "out_of_key_order"
)

// MaxReplicas bounds Options.Replicas: a relay past the number of buckets
// would own none in partitioned mode, and each replica's pool may hold
// relay.PoolSize connections.
const MaxReplicas = 64

// Validate reports the first option out of range, naming the flag of the
// bench command that sets it.
func (o Options) Validate() error {
	switch {
	case o.Mode != "backlog" && o.Mode != "steady":
		return fmt.Errorf("unknown mode %q: want backlog or steady", o.Mode)
	case o.Replicas < 0 || o.Replicas > MaxReplicas:
		return fmt.Errorf("-replicas %d: want 1 to %d", o.Replicas, MaxReplicas)
	case o.Burst && o.Mode != "backlog":
		return errors.New("-burst shapes the backlog: it needs -mode backlog")
	case o.Keys < 0:
		return fmt.Errorf("-keys %d: want 0 (rows without a key) or more", o.Keys)
	case o.KeyOrder != "" && o.KeyOrder != KeyInterleaved && o.KeyOrder != KeyGrouped:
		return fmt.Errorf("-key-order %q: want %s or %s", o.KeyOrder, KeyInterleaved, KeyGrouped)
	}
	return nil
}

// The orders of the keys of a backlog's rows (Options.KeyOrder).
const (
	// KeyInterleaved gives row i key i mod keys: the keys take turns, as
	// the rows of many producers arrive.
	KeyInterleaved = "interleaved"
	// KeyGrouped gives each key a run of consecutive rows: row i has key
	// i*keys/n, so that the runs differ by one row at most.
	KeyGrouped = "grouped"
)

// KeyOf is the key (0 to keys-1) of row row (0 to n-1) of a backlog of n
// rows over keys keys in order (KeyInterleaved when empty).
func KeyOf(row, n, keys int, order string) int {
	if order == KeyGrouped && n > 0 {
		return int(int64(row) * int64(keys) / int64(n))
	}
	return row % keys
}

// keyName is the key column of row row of o's backlog, nil without keys.
func keyName(o Options, row int) *string {
	if o.Keys <= 0 {
		return nil
	}
	k := "key-" + strconv.Itoa(KeyOf(row, o.N, o.Keys, o.KeyOrder))
	return &k
}

// DeliveryMode names the mode relays configured by c run: unordered,
// ordered or partitioned.
func DeliveryMode(c relay.Config) outbox.Mode {
	return cmp.Or(c.Mode, outbox.ModeUnordered)
}

// Run performs one measurement and writes its Result to w.
func Run(ctx context.Context, o Options, w io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Replicas = max(o.Replicas, 1)
	res := Result{
		Name: "outbox-relay", Mode: o.Mode, PayloadBytes: o.PayloadBytes, Label: o.Label,
		Ordered: DeliveryMode(o.Relay) == outbox.ModeOrdered, DeliveryMode: DeliveryMode(o.Relay), Replicas: o.Replicas, Keys: o.Keys,
		KeyOrder:   KeyOrderOf(o),
		Batch:      cmp.Or(o.Relay.BatchSize, relay.BatchSizeDefault),
		GOMAXPROCS: runtime.GOMAXPROCS(0), StartedAt: time.Now().UTC().Format(time.RFC3339),
		Extra: map[string]any{},
	}

	pool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer pool.Close()
	if err := resetScratch(ctx, pool, o); err != nil {
		return err
	}
	pgCPU, pgCPUErr := NewPostgresCPU(ctx, pool)
	if err := prefill(ctx, pool, o); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	lat := newLatencies(o.N)
	rs, err := newReplicas(ctx, o, lat)
	if err != nil {
		return err
	}
	defer rs.close()
	delivered := func() int { n, _ := rs.delivered(); return n }

	var start time.Time
	var pgStart, cpuStart time.Duration
	startClocks := func() {
		start, cpuStart = time.Now(), processCPU()
		if pgCPU != nil {
			pgStart, pgCPUErr = pgCPU.Used()
		}
	}
	runCtx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	var run *running // set while relays run; waited for on every return
	defer func() {
		if run != nil {
			stopRelays()
			_ = run.wait()
		}
	}()
	var buckets *BucketWatch
	switch o.Mode {
	case "backlog":
		t0 := time.Now()
		if err := loadBacklog(ctx, pool, o); err != nil {
			return err
		}
		res.InsertSeconds = round(time.Since(t0).Seconds(), 4)
		startClocks()
		run = rs.start(runCtx)
		if o.Relay.Mode == outbox.ModePartitioned {
			buckets = WatchBuckets(ctx, pool, o.Schema, o.Replicas, start)
			defer buckets.stop()
		}
	case "steady":
		// The producers start once every relay claims, and in partitioned
		// mode once they share the buckets: steady mode measures the
		// stream, not the start.
		started := time.Now()
		run = rs.start(runCtx)
		if o.Relay.Mode == outbox.ModePartitioned {
			buckets = WatchBuckets(ctx, pool, o.Schema, o.Replicas, started)
			defer buckets.stop()
			if err := buckets.waitShared(ctx); err != nil {
				return errors.Join(err, run.early())
			}
		}
		if err := rs.waitClaiming(ctx, run); err != nil {
			return err
		}
		startClocks()
		if err := produce(ctx, pool, o, lat); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	var first time.Duration
	nextProgress := time.Now().Add(time.Second)
	for n := delivered(); n < o.N; n = delivered() {
		if err := run.early(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("only %d of %d delivered: %w", n, o.N, ctx.Err())
		}
		if first == 0 && n > 0 {
			first = time.Since(start)
		}
		if o.Progress != nil && time.Now().After(nextProgress) {
			fmt.Fprintf(o.Progress, "\r%s: %d of %d delivered, %.0f events/s   ", o.Mode, n, o.N, float64(n)/time.Since(start).Seconds())
			nextProgress = nextProgress.Add(time.Second)
		}
		time.Sleep(time.Millisecond)
	}
	if o.Progress != nil {
		fmt.Fprint(o.Progress, "\r\033[K")
	}
	elapsed := time.Since(start)
	if first == 0 {
		first = elapsed
	}
	per100k := func(d time.Duration) float64 { return round(d.Seconds()*100000/float64(o.N), 3) }
	res.Extra[ExtraRelayCPU] = per100k(processCPU() - cpuStart)
	if pgCPU != nil && pgCPUErr == nil {
		var end time.Duration
		if end, pgCPUErr = pgCPU.Used(); pgCPUErr == nil {
			res.Extra[ExtraPostgresCPU] = per100k(end - pgStart)
		}
	}
	if pgCPUErr != nil {
		res.Extra[ExtraPostgresCPU] = "unavailable: " + pgCPUErr.Error()
	}
	if o.Mode == "backlog" {
		res.Extra["first_delivery_ms"] = round(float64(first)/1e6, 1)
		res.Extra["burst"] = o.Burst
	}
	if buckets != nil {
		if err := buckets.End(res.Extra); err != nil {
			return err
		}
	}
	stopRelays()
	err = run.wait()
	run = nil
	if err != nil {
		return err
	}
	var each []int
	res.Events, each = rs.delivered()
	if o.Replicas > 1 {
		res.Extra[ExtraDeliveriesPerRelay] = each
	}
	res.Seconds = round(elapsed.Seconds(), 4)
	res.EventsPerSec = round(float64(res.Events)/elapsed.Seconds(), 1)
	if o.Mode == "steady" {
		p50, p99, worst := lat.percentiles()
		res.P50ms, res.P99ms, res.MaxMs = &p50, &p99, &worst
		res.LatencyBasis = "producer commit -> JetStream ack"
		res.Extra["target_rate"] = o.Rate
		res.Extra["producers"], res.Extra["rows_per_tx"] = max(o.Producers, 1), max(o.RowsPerTx, 1)
	}
	if o.Archived > 0 {
		res.Extra["archived_before"] = o.Archived
	}
	if o.NotDue > 0 {
		res.Extra["not_due"] = o.NotDue
	}
	res.Extra["chosen_keys"] = o.ChosenKeys || o.Mode == "steady"

	for name, of := range map[string]func(*relay.Metrics) prometheus.Collector{
		"claim":   func(m *relay.Metrics) prometheus.Collector { return m.ClaimDuration },
		"settle":  func(m *relay.Metrics) prometheus.Collector { return m.SettleDuration },
		"deliver": func(m *relay.Metrics) prometheus.Collector { return m.DeliverDuration },
	} {
		st := histogramStats(rs.histograms(of)...)
		res.Extra[name+"_count"] = st.count
		res.Extra[name+"_mean_ms"] = round(st.mean*1000, 3)
		res.Extra[name+"_p50_ms"] = round(st.quantile(0.50)*1000, 3)
		res.Extra[name+"_p99_ms"] = round(st.quantile(0.99)*1000, 3)
	}

	v, err := verify(ctx, pool, o)
	if err != nil {
		return err
	}
	res.Extra["outbox_left"], res.Extra["archived"], res.Extra["stream_msgs"] = v.left, v.archived, v.msgs
	if v.outOfOrder >= 0 {
		res.Extra[ExtraOutOfOrder] = v.outOfOrder
	}
	if rss, ok := peakRSS(); ok {
		res.Extra["peak_rss_mb"] = round(float64(rss)/(1<<20), 1)
	}
	// Each event delivered once: with several relays, a row delivered by
	// two of them would count twice (JetStream would keep one copy).
	res.Verified = v.ok && res.Events == o.N
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
// when the producer's commit returned and when the ack came.
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

func (l *latencies) percentiles() (p50, p99, worst float64) {
	var d []time.Duration
	for i := range l.commit {
		c, a := l.commit[i].Load(), l.acked[i].Load()
		if c != 0 && a != 0 {
			d = append(d, time.Duration(a-c))
		}
	}
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	at := func(p float64) float64 {
		return round(float64(d[int(float64(len(d)-1)*p)])/1e6, 3)
	}
	return at(0.50), at(0.99), at(1)
}

// StreamMessages returns the number of messages JetStream stream holds on
// the NATS server at url.
func StreamMessages(ctx context.Context, url, stream string) (uint64, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, stream)
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
	// Every generation of the hot table: a rotation during a long drain
	// leaves rows in a draining one.
	err = pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+q+".messages_all), (SELECT count(*) FROM "+q+".archive)").Scan(&left, &archived)
	return left, archived, err
}

// Payload returns a JSON object of exactly size bytes (when size >= 64)
// carrying seq.
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

// preload writes N rows with COPY in one statement; with o.Burst, every
// one due at the same time, and returns once they are due. That time lies
// ahead of the copy's end (the insert guard makes a row due no earlier than
// its insert, migration 9), as a batch of events scheduled for one time is.
func preload(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	columns := []string{"topic", "payload", "headers", "key", "idempotency_key"}
	var due time.Time
	var wait time.Duration
	if o.Burst {
		// Generous: COPY writes about 50k rows a second here.
		wait = time.Second + time.Duration(o.N)*40*time.Microsecond
		if err := pool.QueryRow(ctx, "SELECT now() + $1::interval", wait).Scan(&due); err != nil {
			return err
		}
		columns = append(columns, "available_at")
	}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= o.N {
			return nil, nil
		}
		key := keyName(o, i)
		i++
		var idem *string
		if o.ChosenKeys {
			k := "bench-" + strconv.Itoa(i)
			idem = &k
		}
		row := []any{Subject, Payload(int64(i), o.PayloadBytes), headers(int64(i)), key, idem}
		if o.Burst {
			row = append(row, due)
		}
		return row, nil
	})
	n, err := pool.CopyFrom(ctx, pgx.Identifier{o.Schema, "messages"}, columns, src)
	if err != nil {
		return err
	}
	if n != int64(o.N) {
		return fmt.Errorf("copied %d rows, want %d", n, o.N)
	}
	if o.Burst {
		var left time.Duration
		if err := pool.QueryRow(ctx, "SELECT greatest($1 - clock_timestamp(), '0')", due).Scan(&left); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(left + 10*time.Millisecond):
		}
	}
	return nil
}

// produce inserts N rows at o.Rate per second from o.Producers
// connections (default 2), o.RowsPerTx rows per transaction (default 1),
// recording when each commit returned. Each row's idempotency key is its
// sequence number.
func produce(ctx context.Context, pool *pgxpool.Pool, o Options, lat *latencies) error {
	producers, perTx := max(o.Producers, 1), max(o.RowsPerTx, 1)
	if o.Producers == 0 {
		producers = 2
	}
	interval := time.Duration(float64(time.Second) * float64(perTx) / o.Rate)
	begin := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	insert := "INSERT INTO " + outbox.QuoteSchema(o.Schema) + ".messages (topic, payload, headers, idempotency_key) VALUES "
	for range producers {
		wg.Go(func() {
			for {
				txn := next.Add(1) - 1
				first := txn*int64(perTx) + 1
				if first > int64(o.N) {
					return
				}
				last := min(first+int64(perTx)-1, int64(o.N))
				if d := time.Until(begin.Add(time.Duration(txn) * interval)); d > 0 {
					time.Sleep(d)
				}
				// One statement, one round trip and one transaction for
				// the transaction's rows, as refloop's producer writes
				// them (its multi-row INSERT): the comparison is of the
				// relays, not of how the producers batch. (Ten one-row
				// statements per transaction cost PostgreSQL 4.5 times
				// refloop's inserts at 10k rows/s, most of the gap in
				// PostgreSQL CPU per event.)
				values := make([]string, 0, last-first+1)
				args := make([]any, 0, 4*(last-first+1))
				for seq := first; seq <= last; seq++ {
					n := len(args)
					values = append(values, fmt.Sprintf("($%d, $%d, $%d::jsonb, $%d)", n+1, n+2, n+3, n+4))
					args = append(args, Subject, Payload(seq, o.PayloadBytes), headers(seq), strconv.FormatInt(seq, 10))
				}
				if _, err := pool.Exec(ctx, insert+strings.Join(values, ", "), args...); err != nil {
					errs <- err
					return
				}
				now := time.Now()
				for seq := first; seq <= last; seq++ {
					lat.committed(seq, now)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// prefill gives the run its history: o.Archived rows in the archive and
// their keys in the delivered keys, delivered evenly over the past six
// days, and o.NotDue rows in the outbox due in a day. Then it vacuums and
// analyzes the tables, as autovacuum would have on a relay that ran for
// days.
func prefill(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	q := outbox.QuoteSchema(o.Schema)
	if o.Archived > 0 {
		if _, err := pool.Exec(ctx, `
INSERT INTO `+q+`.archive (id, topic, payload, headers, idempotency_key, created_at, attempts, delivered_at)
SELECT -g, 'bench.outbox.history', convert_to(rpad('{"seq":' || g || ',"history":"', $2, 'x'), 'UTF8'),
       '{"event-type":"order.created"}', 'history-' || g, at - interval '1 second', 1, at
  FROM generate_series(1, $1::int) AS g,
       LATERAL (SELECT now() - interval '6 days' + (interval '6 days' * g / $1::int) AS at) AS t`, o.Archived, o.PayloadBytes); err != nil {
			return fmt.Errorf("fill the archive: %w", err)
		}
		if _, err := pool.Exec(ctx, `
INSERT INTO `+q+`.delivered_keys (idempotency_key, delivered_at)
SELECT idempotency_key, delivered_at FROM `+q+`.archive WHERE id < 0`); err != nil {
			return fmt.Errorf("fill the delivered keys: %w", err)
		}
	}
	if o.NotDue > 0 {
		if _, err := pool.Exec(ctx, `
INSERT INTO `+q+`.messages (topic, payload, headers, available_at)
SELECT $3, convert_to(rpad('{"seq":' || g || ',"later":"', $2, 'x'), 'UTF8'), '{"event-type":"order.created"}', now() + interval '1 day'
  FROM generate_series(1, $1::int) AS g`, o.NotDue, o.PayloadBytes, Subject); err != nil {
			return fmt.Errorf("add rows not yet due: %w", err)
		}
	}
	if o.Archived > 0 || o.NotDue > 0 {
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+q+".archive, "+q+".delivered_keys, "+q+".messages"); err != nil {
			return fmt.Errorf("vacuum after the prefill: %w", err)
		}
	}
	return nil
}

// counterValue reads a counter without the test-only prometheus/testutil.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// histStats is what a histogram (or every series of a histogram vector)
// holds: its count, mean and cumulative buckets.
type histStats struct {
	count   uint64
	mean    float64
	buckets map[float64]uint64 // upper bound -> cumulative count
}

// histogramStats sums the series of cs.
func histogramStats(cs ...prometheus.Collector) histStats {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		for _, c := range cs {
			c.Collect(ch)
		}
		close(ch)
	}()
	st := histStats{buckets: map[float64]uint64{}}
	var sum float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err == nil && pb.Histogram != nil {
			st.count += pb.Histogram.GetSampleCount()
			sum += pb.Histogram.GetSampleSum()
			for _, b := range pb.Histogram.GetBucket() {
				st.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
	}
	if st.count > 0 {
		st.mean = sum / float64(st.count)
	}
	return st
}

// quantile estimates the q-quantile from the buckets as Prometheus's
// histogram_quantile does: linearly within the bucket that holds it.
func (st histStats) quantile(q float64) float64 {
	if st.count == 0 {
		return 0
	}
	bounds := make([]float64, 0, len(st.buckets))
	for b := range st.buckets {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	rank := q * float64(st.count)
	lower, below := 0.0, uint64(0)
	for _, b := range bounds {
		if c := st.buckets[b]; float64(c) >= rank && c > below {
			return lower + (b-lower)*(rank-float64(below))/float64(c-below)
		}
		lower, below = b, st.buckets[b]
	}
	return lower // beyond the last bucket: its bound
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

// loadBacklog preloads the backlog of o with COPY and analyzes the table.
func loadBacklog(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	if err := preload(ctx, pool, o); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	_, err := pool.Exec(ctx, "ANALYZE "+outbox.QuoteSchema(o.Schema)+".messages")
	return err
}

// PrepareBacklog readies a run of another program on the benchmark's
// scratch schema and stream as Run does in backlog mode: both reset (the
// schema in the mode of o.Relay), the history and rows not yet due of o
// added, its backlog loaded. Verify
// checks the outcome.
func PrepareBacklog(ctx context.Context, o Options) error {
	pool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer pool.Close()
	if err := resetScratch(ctx, pool, o); err != nil {
		return err
	}
	if err := prefill(ctx, pool, o); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	return loadBacklog(ctx, pool, o)
}

// Verify reports whether a run on the scratch schema and stream delivered
// exactly o.N rows and, for keyed rows in ordered and partitioned mode,
// settled each key's rows in order (verify). It records what it counted in
// extra when that is not nil.
func Verify(ctx context.Context, o Options, extra map[string]any) (bool, error) {
	pool, err := pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	v, err := verify(ctx, pool, o)
	if err == nil && extra != nil {
		extra["outbox_left"], extra["archived"], extra["stream_msgs"] = v.left, v.archived, v.msgs
		if v.outOfOrder >= 0 {
			extra[ExtraOutOfOrder] = v.outOfOrder
		}
	}
	return v.ok, err
}

// verification is what a run left: rows of the run still in the table and
// in the archive (the prefill's excluded), and messages in the stream.
type verification struct {
	left, archived int64
	msgs           uint64
	// outOfOrder, for keyed rows in ordered and partitioned mode, counts
	// the messages in the stream that came after a later row of their key
	// (streamOutOfKeyOrder); -1 when not checked.
	outOfOrder int64
	ok         bool // none left, o.N archived, o.N in the stream, none out of order
}

// keyOrdered reports whether the relays of o keep each key's rows in
// order: keyed rows in ordered or partitioned mode.
func keyOrdered(o Options) bool {
	return o.Keys > 0 && DeliveryMode(o.Relay) != outbox.ModeUnordered
}

// KeyOrderOf is the order of the keys of o's rows, empty without keys.
func KeyOrderOf(o Options) string {
	if o.Keys <= 0 {
		return ""
	}
	return cmp.Or(o.KeyOrder, KeyInterleaved)
}

func verify(ctx context.Context, pool *pgxpool.Pool, o Options) (verification, error) {
	left, archived, err := counts(ctx, pool, o.Schema)
	if err != nil {
		return verification{}, err
	}
	msgs, err := StreamMessages(ctx, o.NatsURL, Stream)
	if err != nil {
		return verification{}, err
	}
	v := verification{left: left - int64(o.NotDue), archived: archived - int64(o.Archived), msgs: msgs, outOfOrder: -1}
	if keyOrdered(o) && v.msgs == uint64(o.N) {
		if v.outOfOrder, err = streamOutOfKeyOrder(ctx, o); err != nil {
			return verification{}, fmt.Errorf("check per-key order: %w", err)
		}
	}
	v.ok = v.left == 0 && v.archived == int64(o.N) && v.msgs == uint64(o.N) && v.outOfOrder <= 0
	return v, nil
}

// streamOutOfKeyOrder reads the headers of the o.N messages of the stream,
// in the stream's order, and counts those that came after a later row of
// their key: the row's sequence number is in its trace-id header (headers)
// and its key follows from it (KeyOf). Headers only, with one ordered
// consumer: about a second for 200k messages.
func streamOutOfKeyOrder(ctx context.Context, o Options) (int64, error) {
	nc, err := nats.Connect(o.NatsURL)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	cons, err := js.OrderedConsumer(ctx, Stream, jetstream.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		return 0, err
	}
	last := make([]int64, o.Keys) // the last sequence number seen of each key
	var outOfOrder int64
	for read := 0; read < o.N; {
		batch, err := cons.Fetch(min(o.N-read, 5000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return 0, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			seq, err := strconv.ParseInt(m.Headers().Get("trace-id"), 16, 64)
			if err != nil || seq < 1 || seq > int64(o.N) {
				return 0, fmt.Errorf("message %d of the stream: trace-id %q is no row of the backlog", read+got, m.Headers().Get("trace-id"))
			}
			k := KeyOf(int(seq-1), o.N, o.Keys, o.KeyOrder)
			if seq < last[k] {
				outOfOrder++
			}
			last[k] = max(last[k], seq)
		}
		if err := batch.Error(); err != nil {
			return 0, err
		}
		if got == 0 {
			return 0, fmt.Errorf("the stream gave %d of %d messages", read, o.N)
		}
		read += got
	}
	return outOfOrder, nil
}
