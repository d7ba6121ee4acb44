package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/bench"
)

// isClaimStatement reports whether a statement pg_stat_statements
// recorded is a claim: the relay's start with WITH due AS MATERIALIZED,
// every claim (the relay's in each mode, refloop's) locks with SKIP
// LOCKED. Case, line breaks, indentation and leading comments do not
// matter.
func isClaimStatement(query string) bool {
	q := strings.ToUpper(strings.Join(strings.Fields(stripLeadingComments(query)), " "))
	return strings.HasPrefix(q, "WITH DUE AS MATERIALIZED") || strings.Contains(q, " SKIP LOCKED")
}

func stripLeadingComments(q string) string {
	for {
		q = strings.TrimSpace(q)
		switch {
		case strings.HasPrefix(q, "--"):
			_, rest, ok := strings.Cut(q, "\n")
			if !ok {
				return ""
			}
			q = rest
		case strings.HasPrefix(q, "/*"):
			_, rest, ok := strings.Cut(q, "*/")
			if !ok {
				return ""
			}
			q = rest
		default:
			return q
		}
	}
}

// receipts records, per row of a relay's producer (its sequence number,
// carried in the trace-id header), when its commit returned, and the
// latency from there to the first receipt of the row on the stream.
type receipts struct {
	commit []atomic.Int64
	seen   []atomic.Bool
	mu     sync.Mutex
	window []time.Duration // since the last take
	all    []time.Duration
}

func newReceipts(n int) *receipts {
	return &receipts{commit: make([]atomic.Int64, n+1), seen: make([]atomic.Bool, n+1)}
}

func (r *receipts) committed(seq int, t time.Time) { r.commit[seq].Store(t.UnixNano()) }

func (r *receipts) received(seq int, t time.Time) {
	if seq < 1 || seq >= len(r.commit) || r.seen[seq].Swap(true) {
		return
	}
	c := r.commit[seq].Load()
	if c == 0 {
		return // the commit's time not yet stored: a few microseconds' race, skipped
	}
	r.mu.Lock()
	r.window = append(r.window, time.Duration(t.UnixNano()-c))
	r.mu.Unlock()
}

// take returns the p99 of the latencies since the last take.
func (r *receipts) take() *float64 {
	r.mu.Lock()
	w := r.window
	r.window = nil
	r.all = append(r.all, w...)
	r.mu.Unlock()
	return p99ms(w)
}

func (r *receipts) wholeRun() *float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return p99ms(append(slices.Clone(r.all), r.window...))
}

func p99ms(d []time.Duration) *float64 {
	if len(d) == 0 {
		return nil
	}
	v := quantileMs(d, 0.99)
	return &v
}

// subscribe receives what the relay publishes, on a plain subscription to
// its subjects: a message is received as JetStream stores it.
func subscribe(c *contender) (*nats.Conn, error) {
	nc, err := nats.Connect(c.nats)
	if err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(c.prefix+">", func(m *nats.Msg) {
		now := time.Now()
		if seq, err := strconv.ParseInt(m.Header.Get("trace-id"), 16, 64); err == nil {
			c.receipts.received(int(seq), now)
		}
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// produce inserts rows into the relay's outbox at o.Rate per second from
// o.Producers connections, one row per transaction, until ctx ends, with
// the idempotency keys the table generates (the default). Each row
// carries its sequence number in its trace-id header.
func produce(ctx context.Context, o pinOptions, c *contender) error {
	cfg, err := pgxpool.ParseConfig(c.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(o.Producers)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	interval := time.Duration(float64(time.Second) / o.Rate)
	begin := time.Now()
	var next atomic.Int64
	errs := make(chan error, o.Producers)
	var wg sync.WaitGroup
	const insert = "INSERT INTO outbox.messages (topic, payload, headers, key) VALUES ($1, $2, $3::jsonb, $4)"
	for range o.Producers {
		wg.Go(func() {
			for {
				seq := next.Add(1)
				if int(seq) >= len(c.receipts.commit) {
					return
				}
				if d := time.Until(begin.Add(time.Duration(seq-1) * interval)); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
				hdr := map[string]string{"event-type": "order.created", "trace-id": strconv.FormatInt(seq, 16)}
				var key *string
				if o.Mode != "" && o.Keys > 0 {
					k := "k" + strconv.FormatInt(seq%int64(o.Keys), 10)
					key = &k
				}
				if _, err := pool.Exec(ctx, insert, pinTopic, bench.Payload(seq, o.PayloadBytes), hdr, key); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				c.receipts.committed(int(seq), time.Now())
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// histogram is the claim histogram of a relay's /metrics, its series
// summed.
type histogram struct {
	count, sum float64
	buckets    map[float64]float64 // upper bound -> cumulative count
}

// scrapeClaims reads outbox_relay_claim_duration_seconds from a relay's
// /metrics (the text format).
func scrapeClaims(ctx context.Context, url string) (histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return histogram{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return histogram{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return histogram{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseClaimHistogram(resp.Body)
}

func parseClaimHistogram(r io.Reader) (histogram, error) {
	const name = "outbox_relay_claim_duration_seconds"
	h := histogram{buckets: map[float64]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(rest, "_bucket{"):
			_, le, ok := strings.Cut(rest, `le="`)
			if !ok {
				continue
			}
			le, _, _ = strings.Cut(le, `"`)
			bound, err := strconv.ParseFloat(le, 64)
			if err == nil {
				h.buckets[bound] += v
			}
		case strings.HasPrefix(rest, "_sum"):
			h.sum += v
		case strings.HasPrefix(rest, "_count"):
			h.count += v
		}
	}
	if len(h.buckets) == 0 {
		return h, fmt.Errorf("no %s in the metrics", name)
	}
	return h, sc.Err()
}

// minus is the histogram of the observations since prev.
func (h histogram) minus(prev histogram) histogram {
	d := histogram{count: h.count - prev.count, sum: h.sum - prev.sum, buckets: map[float64]float64{}}
	for b, n := range h.buckets {
		d.buckets[b] = n - prev.buckets[b]
	}
	return d
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linearly within the bucket that holds it.
func (h histogram) quantile(q float64) float64 {
	if h.count <= 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(h.buckets))
	for b := range h.buckets {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	rank := q * h.count
	lower, below := 0.0, 0.0
	for _, b := range bounds {
		if c := h.buckets[b]; c >= rank && c > below {
			if math.IsInf(b, 1) {
				return b // past the last finite bound: unknown how far
			}
			return lower + (b-lower)*(rank-below)/(c-below)
		}
		lower, below = b, h.buckets[b]
	}
	return lower
}

// lastBound is the largest finite bucket bound.
func (h histogram) lastBound() float64 {
	var last float64
	for b := range h.buckets {
		if !math.IsInf(b, 1) {
			last = max(last, b)
		}
	}
	return last
}

// claimP99 is the claim p99, "> 5000 ms" when past the last bucket.
func (s pinSample) claimP99() string {
	if s.ClaimP99AboveBuckets {
		return "> " + optMs(s.ClaimP99Ms)
	}
	return optMs(s.ClaimP99Ms)
}

// sampleAll takes a sample of every contender: the interval since the
// previous one. A sample at zero sets the baseline and records nothing.
// With w set, each contender's line is printed. The oldest xmin age counts
// the sessions' transaction ids as well as their xmins: an idle
// transaction holding an xid (-pin-how xid) has no xmin between
// statements, yet holds the horizon all the same.
func sampleAll(ctx context.Context, cs []*contender, after time.Duration, pinHeld bool, w io.Writer) error {
	stmts := map[string]counters{}
	for _, server := range servers(cs) {
		part, err := claimStatements(ctx, server, cs)
		if err != nil {
			return fmt.Errorf("read pg_stat_statements: %w", err)
		}
		maps.Copy(stmts, part)
	}
	if w != nil {
		fmt.Fprintf(w, "after %s (load %s)\n", after.Round(time.Second), loadavg())
	}
	for _, c := range cs {
		cur := stmts[c.DB]
		err := tableStats(ctx, c, &cur)
		// Refloop makes its tables once started: until then its figures
		// stay zero. The relay's exist from its migration on.
		if err != nil && !(c.Kind == "refloop" && errors.Is(err, pgx.ErrNoRows)) {
			return fmt.Errorf("%s: table statistics: %w", c.Name, err)
		}
		var claimP99, receiptP99 *float64
		var above bool
		if c.Kind == "relay" {
			if cur.hist, err = scrapeClaims(ctx, c.metrics); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
			if after > 0 {
				d := cur.hist.minus(c.prev.hist)
				if q := d.quantile(0.99); !math.IsNaN(q) {
					if math.IsInf(q, 1) {
						q, above = d.lastBound(), true
					}
					q *= 1000
					claimP99 = &q
				}
			}
			receiptP99 = c.receipts.take()
		}
		prev := c.prev
		c.prev = cur
		if after == 0 {
			continue
		}
		s := pinSample{
			AfterS: after.Round(time.Second).Seconds(), PinHeld: pinHeld,
			DeadTuples: cur.dead, RowsInTable: cur.live, XminAge: cur.xminAge,
			ArchiveDeadTuples: cur.archDead, TablesDiskBytes: cur.diskBytes,
			Produced: max(cur.hotIns-prev.hotIns, 0), Delivered: max(cur.hotDel-prev.hotDel, 0),
			Claims:     max(cur.calls-prev.calls, 0),
			ClaimP99Ms: claimP99, ClaimP99AboveBuckets: above, CommitReceiptP99Ms: receiptP99,
		}
		if s.Claims > 0 {
			s.ClaimMeanMs = max(cur.execMs-prev.execMs, 0) / float64(s.Claims)
			s.BuffersPerClaim = float64(max(cur.blocks-prev.blocks, 0)) / float64(s.Claims)
		}
		c.Samples = append(c.Samples, s)
		if w != nil {
			fmt.Fprintf(w, "  %-16s %s\n", c.Name, s.line())
		}
	}
	return nil
}

// relayTables are the relay's tables, whose disk a sample sums: the hot
// table's generations (messages_all and the tables that inherit from it,
// relay/internal/rotation), the archive and the delivered keys
// partitioned (relay/internal/history), the dead letters plain. A build
// of the relay from before the generations (schema version 23 or older)
// has a plain messages instead: tableStats falls back to it.
var relayTables = []string{"messages_all", "archive", "delivered_keys", "dead_letters"}

// queryTableStats reads a contender's table figures in one statement:
// the hot table's ($2) dead and live tuples, inserts and deletes; the
// archive's ($3) dead tuples; the disk of the tables $4
// (pg_total_relation_size: heap, indexes and TOAST); each summed over the
// table's leaves; the tables of $2, $3 and $4 missing from schema $1; and
// the oldest xmin age of the database's sessions (see sampleAll). No row
// when the hot table does not exist.
//
// A table stands for its leaves: the leaf partitions of a partitioned
// table (pg_partition_tree: the relay's archive and delivered keys), or a
// plain table and the tables that inherit from it (pg_inherits: the
// relay's messages_all and its generations, with the empty spares taken
// out of it, messages_g<slot>; refloop's plain tables have none). The statistics count a partitioned table's rows in its
// partitions alone, and pg_total_relation_size of a partitioned table is
// zero. to_regclass, unlike a cast, makes a missing table NULL rather
// than an error, so that the statement can name it.
// pg_total_relation_size is NULL for a partition dropped meanwhile, which
// the sum skips; a generation's statistics outlive its truncation (its
// inserts and deletes are cumulative).
//
// The rows delivered are the hot table's deletes (a row leaves it when it
// is archived, or dead-lettered), not the archive's inserts: those are a
// sum over partitions that come and go, and a partition dropped by
// retention (-relay-env RELAY_ARCHIVE_RETENTION=…) would take its inserts
// out of the sum. Rows carried from one generation into another count as
// deletes too; the relay carries only rows that wait (delayed, in
// backoff), which a benchmark's rows do not.
const queryTableStats = `
WITH t AS (
    SELECT DISTINCT n.name, to_regclass(format('%I.%I', $1::text, n.name)) AS oid
      FROM unnest(array_append(array_append($4::text[], $3::text), $2::text)) AS n (name)
), leaves AS (
    SELECT t.name, p.relid
      FROM t
     CROSS JOIN LATERAL (SELECT tree.relid FROM pg_catalog.pg_partition_tree(t.oid) AS tree WHERE tree.isleaf
                         UNION ALL
                         SELECT k.oid FROM pg_catalog.pg_class AS k WHERE k.oid = t.oid AND k.relkind = 'r'
                         UNION ALL
                         SELECT i.inhrelid FROM pg_catalog.pg_inherits AS i
                           JOIN pg_catalog.pg_class AS k ON k.oid = i.inhparent
                          WHERE i.inhparent = t.oid AND k.relkind = 'r'
                         UNION ALL
                         SELECT s.oid FROM pg_catalog.pg_class AS s
                          WHERE t.name = 'messages_all' AND s.relkind = 'r'
                            AND s.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace AS n WHERE n.nspname = $1) AND s.relname ~ '^messages_g[0-9]+$'
                            AND NOT EXISTS (SELECT FROM pg_catalog.pg_inherits AS i WHERE i.inhrelid = s.oid)) AS p
), hot AS (
    SELECT coalesce(sum(s.n_dead_tup), 0)::bigint AS dead, coalesce(sum(s.n_live_tup), 0)::bigint AS live,
           coalesce(sum(s.n_tup_ins), 0)::bigint AS ins, coalesce(sum(s.n_tup_del), 0)::bigint AS del
      FROM leaves AS l JOIN pg_catalog.pg_stat_user_tables AS s ON s.relid = l.relid WHERE l.name = $2
)
SELECT h.dead, h.live, h.ins, h.del,
       (SELECT coalesce(sum(s.n_dead_tup), 0)::bigint
          FROM leaves AS l JOIN pg_catalog.pg_stat_user_tables AS s ON s.relid = l.relid WHERE l.name = $3),
       (SELECT coalesce(sum(pg_catalog.pg_total_relation_size(l.relid)), 0)::bigint
          FROM leaves AS l WHERE l.name = ANY ($4)),
       (SELECT coalesce(array_agg(t.name ORDER BY t.name), '{}') FROM t WHERE t.oid IS NULL AND t.name <> $2),
       (SELECT coalesce(max(greatest(age(backend_xmin), age(backend_xid))), 0)
          FROM pg_catalog.pg_stat_activity WHERE datname = current_database())
  FROM hot AS h
 WHERE EXISTS (SELECT FROM t WHERE t.name = $2 AND t.oid IS NOT NULL)`

// tableStats reads c's table figures (queryTableStats) into cur: an
// error wrapping pgx.ErrNoRows when its hot table does not exist yet,
// and one naming them when its other tables do not all exist beside it,
// rather than figures silently short of them. A relay's schema from
// before the hot table's generations has messages alone: once a relay
// registered in it (its migrations done) without messages_all, c names
// messages instead from then on.
func tableStats(ctx context.Context, c *contender, cur *counters) error {
	var missing []string
	err := c.stats.QueryRow(ctx, queryTableStats, c.hotSchema, c.hot, c.archived, c.tables).
		Scan(&cur.dead, &cur.live, &cur.hotIns, &cur.hotDel, &cur.archDead, &cur.diskBytes, &missing, &cur.xminAge)
	if errors.Is(err, pgx.ErrNoRows) && c.hot == "messages_all" {
		old := slices.Clone(c.tables)
		for i, t := range old {
			if t == "messages_all" {
				old[i] = "messages"
			}
		}
		// Only once a relay registered: its migrations are done, so a
		// schema between versions 23 and 24 is not mistaken for an old one.
		var registered bool
		if c.stats.QueryRow(ctx, "SELECT to_regclass(format('%I.relays', $1::text)) IS NOT NULL AND to_regclass(format('%I.messages', $1::text)) IS NOT NULL",
			c.hotSchema).Scan(&registered) == nil && registered &&
			c.stats.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT FROM %s)", pgx.Identifier{c.hotSchema, "relays"}.Sanitize())).Scan(&registered) == nil && registered {
			c.hot, c.tables = "messages", old
			return tableStats(ctx, c, cur)
		}
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("no table %s.%s: %w", c.hotSchema, c.hot, err)
	case err != nil:
		return err
	case len(missing) > 0:
		return fmt.Errorf("no table %s in schema %s", strings.Join(missing, ", "), c.hotSchema)
	}
	return nil
}

// claimStatements sums, per database of cs, the calls, execution time and
// shared buffers (hit and read) of its claim statements.
func claimStatements(ctx context.Context, admin *pgxpool.Pool, cs []*contender) (map[string]counters, error) {
	var dbs []string
	for _, c := range cs {
		dbs = append(dbs, c.DB)
	}
	rows, err := admin.Query(ctx, `
SELECT d.datname, s.query, s.calls, s.total_exec_time, s.shared_blks_hit + s.shared_blks_read
  FROM pg_stat_statements AS s JOIN pg_catalog.pg_database AS d ON d.oid = s.dbid
 WHERE d.datname = ANY ($1)`, dbs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]counters{}
	for rows.Next() {
		var db, query string
		var calls, blocks int64
		var ms float64
		if err := rows.Scan(&db, &query, &calls, &ms, &blocks); err != nil {
			return nil, err
		}
		if isClaimStatement(query) {
			c := out[db]
			c.calls += calls
			c.execMs += ms
			c.blocks += blocks
			out[db] = c
		}
	}
	return out, rows.Err()
}

// mean is the claim mean, or a dash for an interval without claims.
func (s pinSample) mean() string {
	if s.Claims == 0 {
		return "—"
	}
	return ms(s.ClaimMeanMs)
}

func (s pinSample) line() string {
	l := fmt.Sprintf("dead %7s  rows %7s  produced %6s  delivered %6s  claims %6d  mean %9s  buffers/claim %7s  disk %9s  archive dead %7s",
		count(s.DeadTuples), count(s.RowsInTable), count(s.Produced), count(s.Delivered), s.Claims, s.mean(), count(int64(math.Round(s.BuffersPerClaim))),
		size(s.TablesDiskBytes), count(s.ArchiveDeadTuples))
	if s.ClaimP99Ms != nil {
		l += "  claim p99 " + s.claimP99()
	}
	if s.CommitReceiptP99Ms != nil {
		l += "  commit→receipt p99 " + ms(*s.CommitReceiptP99Ms)
	}
	if s.XminAge > 1000 {
		l += "  oldest xmin age " + count(s.XminAge)
	}
	return l
}

// count writes n as the issue does: 832k, 1.2M.
func count(n int64) string {
	switch {
	case n < 10000:
		return strconv.FormatInt(n, 10)
	case n < 1000000:
		return fmt.Sprintf("%.0fk", float64(n)/1000)
	}
	return fmt.Sprintf("%.2fM", float64(n)/1e6)
}

// size writes n bytes in binary units, one decimal, as the relay's
// status does (internal/cli's formatBytes): 812 bytes, 8.0 kB, 123.4 MB.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTP"[exp])
}

func ms(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case v < 1:
		return fmt.Sprintf("%.2f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func optMs(v *float64) string {
	if v == nil {
		return "—"
	}
	return ms(*v)
}

// printPinTables prints the table (a row per sample), the
// refloop results, the readers' transactions with -pin-how readers, and
// the summary line with the pinned / unpinned ratios of the last
// interval. The pinned columns and the summary name the pin (pinLabel).
func printPinTables(w io.Writer, cs []*contender, rep *pinReport) {
	find := func(name string) *contender {
		for _, c := range cs {
			if c.Name == name {
				return c
			}
		}
		return nil
	}
	un, pn, ref := find("relay unpinned"), find("relay pinned"), find("refloop pinned")
	fmt.Fprintf(w, "\nload before %s, after %s; %s; PostgreSQL %s\n\n", rep.LoadBefore, rep.LoadAfter, rep.Version, rep.Server)
	label := pinLabel(rep.Options.PinHow)
	fmt.Fprintf(w, "| after | unpinned: dead tuples / claim mean | pinned (%s): dead tuples / claim mean / buffers per claim | ideal loop pinned: claim mean | claim p99 unpinned / pinned | commit→receipt p99 unpinned / pinned |\n", label)
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	for i := range un.Samples {
		u, p := un.Samples[i], pn.Samples[i]
		refMean := "—"
		if ref != nil && i < len(ref.Samples) {
			refMean = ref.Samples[i].mean()
		}
		fmt.Fprintf(w, "| %s | %s / %s | %s / %s / %s | %s | %s / %s | %s / %s |\n",
			time.Duration(u.AfterS*float64(time.Second)), count(u.DeadTuples), u.mean(),
			count(p.DeadTuples), p.mean(), count(int64(math.Round(p.BuffersPerClaim))), refMean,
			u.claimP99(), p.claimP99(), optMs(u.CommitReceiptP99Ms), optMs(p.CommitReceiptP99Ms))
	}
	var rates []string
	for _, c := range cs {
		var n int64
		for _, s := range c.Samples {
			n += s.Produced
		}
		if len(c.Samples) > 0 {
			rates = append(rates, fmt.Sprintf("%s %.0f", c.Name, float64(n)/c.Samples[len(c.Samples)-1].AfterS))
		}
	}
	fmt.Fprintf(w, "\nrows committed per second (target %g): %s\n", rep.Options.Rate, strings.Join(rates, ", "))
	for _, c := range cs {
		if c.Kind == "refloop" {
			if c.Refloop == nil {
				fmt.Fprintf(w, "%s: did not deliver every row and print its result within the grace time\n", c.Name)
			} else {
				fmt.Fprintf(w, "%s: its own result: %.0f events/s, commit→ack p50 %s p99 %s, verified %v\n",
					c.Name, c.Refloop.EventsPerSec, optMs(c.Refloop.P50ms), optMs(c.Refloop.P99ms), c.Refloop.Verified)
			}
		}
	}
	if rep.Options.PinHow == pinHowReaders {
		var reads []string
		for _, c := range cs {
			if c.Pinned {
				reads = append(reads, fmt.Sprintf("%s %d", c.Name, c.PinReads))
			}
		}
		fmt.Fprintf(w, "read transactions of the pin's readers (%d per pinned database): %s\n", pinReaders, strings.Join(reads, ", "))
	}
	rep.SummaryLine = summaryLine(un, pn, ref, label)
	fmt.Fprintln(w, "\n"+rep.SummaryLine)
}

// summaryLine compares the last interval of the pinned relay with the
// unpinned one's, the pinned relay's last interval with its first after
// the pin (flat is 1×), and refloop's pinned claims with the relay's;
// label names the pin.
func summaryLine(un, pn, ref *contender, label string) string {
	last := len(un.Samples) - 1
	if last < 0 || len(pn.Samples) <= last {
		return "summary: no samples"
	}
	u, p := un.Samples[last], pn.Samples[last]
	ratio := func(a, b float64) string {
		if b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
			return "—"
		}
		return fmt.Sprintf("%.1f×", a/b)
	}
	opt := func(a, b *float64) string {
		if a == nil || b == nil {
			return "—"
		}
		return ratio(*a, *b)
	}
	// The disk moves by tens of percent where the claims move by
	// multiples: two decimals.
	disk := "—"
	if u.TablesDiskBytes > 0 {
		disk = fmt.Sprintf("%.2f×", float64(p.TablesDiskBytes)/float64(u.TablesDiskBytes))
	}
	s := fmt.Sprintf("summary after %s, pinned (%s) / unpinned: claim mean %s, claim p99 %s, commit→receipt p99 %s, dead tuples %s, buffers per claim %s, tables' disk at the end %s",
		time.Duration(u.AfterS*float64(time.Second)), label, ratio(p.ClaimMeanMs, u.ClaimMeanMs), opt(p.ClaimP99Ms, u.ClaimP99Ms),
		opt(p.CommitReceiptP99Ms, u.CommitReceiptP99Ms), ratio(float64(p.DeadTuples), float64(u.DeadTuples)),
		ratio(p.BuffersPerClaim, u.BuffersPerClaim), disk)
	if i := slices.IndexFunc(pn.Samples, func(s pinSample) bool { return s.PinHeld }); i >= 0 && i < last {
		s += fmt.Sprintf("; pinned claim mean, last interval / first with the pin: %s", ratio(p.ClaimMeanMs, pn.Samples[i].ClaimMeanMs))
	}
	if ref != nil && len(ref.Samples) > last {
		s += fmt.Sprintf("; relay pinned / refloop pinned claim mean: %s", ratio(p.ClaimMeanMs, ref.Samples[last].ClaimMeanMs))
	}
	return s
}
