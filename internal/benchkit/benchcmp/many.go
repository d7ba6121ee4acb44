package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/bench"
)

// The many-outboxes benchmark (-many-outboxes, issue 23): one relay binary
// serving several outboxes (schemas) of one database, on a PostgreSQL
// server of its own with stock settings (openServer, as -pin-horizon).
//
// Idle: o.Outboxes migrated, empty schemas served by one relay
// (RELAY_SCHEMA_MATCH), in turn without backoff (RELAY_IDLE_POLL_INTERVAL =
// RELAY_POLL_INTERVAL: what as many single-outbox relays' polling costs),
// with the defaults, with RELAY_NOTIFY=true, and one relay on one of the
// schemas with the defaults; before them the server alone. Each runs for
// o.Warmup, then is measured for o.Duration: the statements the relay runs
// (pg_stat_statements calls in its database, and the transactions of
// pg_stat_database), its claims (its claim histogram's count, summed over
// the outboxes), the server's CPU (its processes' /proc/<pid>/stat) and
// execution time (pg_stat_statements), the relay's CPU and the
// connections it holds (pg_stat_activity).
//
// Fair: schema hot with o.Backlog rows due and schema cold with a trickle
// of o.TrickleRate rows a second (one per transaction), served by one relay
// (RELAY_SCHEMAS=hot,cold, defaults): the trickle's commit → receipt
// latency while hot drains and then, for o.TrickleAlone, with hot empty,
// and hot's drain (exec until no row of hot is due).

// manyOptions configure a many-outboxes run.
type manyOptions struct {
	Binary       string        `json:"binary"`
	PGURL        string        `json:"pg_url,omitempty"`
	PGBin        string        `json:"pg_bin,omitempty"`
	PGPort       int           `json:"pg_port"`
	PGConf       []string      `json:"pg_conf,omitempty"`  // more settings of the benchmark's own server (-pg-conf)
	NatsURL      string        `json:"nats_url,omitempty"` // default: a JetStream server in process
	Parts        []string      `json:"parts"`              // idle, fair
	Outboxes     int           `json:"outboxes"`
	Warmup       time.Duration `json:"warmup_ns"`
	Duration     time.Duration `json:"duration_ns"`
	Baseline     time.Duration `json:"baseline_ns"` // the server alone; 0 skips it
	Backlog      int           `json:"backlog"`
	TrickleRate  float64       `json:"trickle_rate"`
	TrickleAlone time.Duration `json:"trickle_alone_ns"`
	PayloadBytes int           `json:"payload_bytes"`
	JSON         string        `json:"-"`
	// Golden is the relay's golden statements (relay/testdata), which name
	// the statements; found from the working directory when empty.
	Golden string `json:"-"`
}

func (o manyOptions) has(part string) bool {
	for _, p := range o.Parts {
		if p == part {
			return true
		}
	}
	return false
}

func (o manyOptions) validate() error {
	switch {
	case o.Binary == "":
		return errors.New("-many-outboxes needs -binary, the outbox-relay binary (make build writes bin/outbox-relay)")
	case len(o.Parts) == 0:
		return errors.New("-parts: want idle, fair or both")
	case o.Outboxes < 2 || o.Outboxes > 1000:
		return fmt.Errorf("-outboxes %d: want from 2 to 1000", o.Outboxes)
	case o.Warmup < 0 || o.Duration <= 0 || o.Baseline < 0 || o.TrickleAlone <= 0:
		return errors.New("-warmup, -baseline: want 0 or more; -duration, -trickle-alone: want more than 0")
	case o.Backlog < 1 || o.TrickleRate <= 0 || o.TrickleRate > 1000 || o.PayloadBytes < 1:
		return errors.New("-backlog, -payload: want at least 1; -trickle-rate: want more than 0, at most 1000")
	}
	for _, p := range o.Parts {
		if p != "idle" && p != "fair" {
			return fmt.Errorf("-parts: %q is neither idle nor fair", p)
		}
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return fmt.Errorf("%w (make bench-many-outboxes builds bin/outbox-relay)", err)
	}
	return nil
}

// manyReport is the run, as -json writes it.
type manyReport struct {
	StartedAt  string       `json:"started_at"`
	Version    string       `json:"relay_version"`
	Server     string       `json:"server_version"`
	LoadBefore string       `json:"load_before"`
	LoadAfter  string       `json:"load_after"`
	Options    manyOptions  `json:"options"`
	Idle       []idleResult `json:"idle,omitempty"`
	Fair       *fairResult  `json:"fair,omitempty"`
	Notes      []string     `json:"notes,omitempty"`
}

// idleResult is one configuration of the idle part, over its window.
type idleResult struct {
	Name     string   `json:"name"`
	Env      []string `json:"env"`
	Outboxes int      `json:"outboxes"` // served, from its /metrics
	WindowS  float64  `json:"window_s"`
	Load     string   `json:"load_after"`
	// The relay's statements (pg_stat_statements calls in its database)
	// and transactions (pg_stat_database xact_commit + xact_rollback).
	StatementsPerS   float64 `json:"statements_per_s"`
	TransactionsPerS float64 `json:"transactions_per_s"`
	ClaimsPerS       float64 `json:"claims_per_s"`
	// The server's CPU, in percent of one core (all its processes), and
	// the execution time pg_stat_statements recorded, in ms a second.
	PostgresCPUPct float64 `json:"postgres_cpu_pct"`
	ExecMsPerS     float64 `json:"exec_ms_per_s"`
	RelayCPUPct    float64 `json:"relay_cpu_pct"`
	// Connections of the relay at the end of the window, and the most seen.
	Connections    int         `json:"connections"`
	ConnectionsMax int         `json:"connections_max"`
	Top            []stmtGroup `json:"statements"`
}

// fairResult is the fairness part.
type fairResult struct {
	Backlog      int          `json:"backlog"`
	TrickleRate  float64      `json:"trickle_rate"`
	ReadyS       float64      `json:"ready_s"` // exec → /readyz 200
	DrainS       float64      `json:"drain_s"` // exec → no row of hot due
	DrainPerS    float64      `json:"drain_rows_per_s"`
	Beside       latencyStats `json:"beside_backlog"`
	Alone        latencyStats `json:"hot_empty"`
	P50Ratio     float64      `json:"p50_ratio"`
	P99Ratio     float64      `json:"p99_ratio"`
	StreamMsgs   uint64       `json:"stream_messages"` // hot's and cold's, as JetStream stored them
	LoadDuring   string       `json:"load_at_drain_end"`
	TrickleStart float64      `json:"trickle_start_s"` // after exec
}

const (
	manyMarker   = "outbox-relay benchcmp -many-outboxes scratch database: dropped by its runs"
	manyIdleDB   = "outbox_many_idle"
	manyFairDB   = "outbox_many_fair"
	manyPattern  = `tenant\_%`
	hotTopic     = "bench.hot"
	coldTopic    = "bench.cold"
	idlePrefix   = "many."
	fairPrefix   = "fair."
	sampleConnsE = 5 * time.Second
)

func tenantSchema(i int) string { return fmt.Sprintf("tenant_%02d", i) }

// idleConfig is one relay configuration of the idle part.
type idleConfig struct {
	name     string
	env      []string
	outboxes int
}

func idleConfigs(n int) []idleConfig {
	match := "RELAY_SCHEMA_MATCH=" + manyPattern
	return []idleConfig{
		{fmt.Sprintf("%d outboxes, no backoff (RELAY_IDLE_POLL_INTERVAL=50ms)", n), []string{match, "RELAY_IDLE_POLL_INTERVAL=50ms"}, n},
		{fmt.Sprintf("%d outboxes, defaults (idle cap 1s)", n), []string{match}, n},
		{fmt.Sprintf("%d outboxes, RELAY_NOTIFY=true (idle cap 10s)", n), []string{match, "RELAY_NOTIFY=true"}, n},
		{"1 outbox, defaults (no backoff)", []string{"RELAY_SCHEMA=" + tenantSchema(0)}, 1},
	}
}

// runManyOutboxes runs the benchmark and writes its tables to w.
func runManyOutboxes(ctx context.Context, o manyOptions, w io.Writer) (*manyReport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Golden == "" {
		o.Golden = findGolden("relay/testdata", "../../../relay/testdata")
	}
	golden := goldenStatements(o.Golden)
	rep := &manyReport{StartedAt: time.Now().UTC().Format(time.RFC3339), Options: o, LoadBefore: loadavg()}
	if out, err := exec.CommandContext(ctx, o.Binary, "version").Output(); err == nil {
		rep.Version = strings.TrimSpace(string(out))
	}
	adminURL, admin, stopServer, err := openServer(ctx, o.PGURL, o.PGBin, o.PGPort, o.PGConf, w, &rep.Server)
	if err != nil {
		return nil, err
	}
	defer stopServer()
	var dbs []string
	if o.has("idle") {
		dbs = append(dbs, manyIdleDB)
	}
	if o.has("fair") {
		dbs = append(dbs, manyFairDB)
	}
	if err := createDatabases(ctx, admin, dbs, manyMarker); err != nil {
		return nil, err
	}
	defer dropDatabases(admin, dbs)
	natsURL := o.NatsURL
	if natsURL == "" {
		store, err := os.MkdirTemp("", "outbox-many-nats-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(store)
		ns, err := startNATS(store)
		if err != nil {
			return nil, err
		}
		defer ns.Shutdown()
		natsURL = ns.ClientURL()
	}
	fmt.Fprintf(w, "%s; PostgreSQL %s; load %s\n", rep.Version, rep.Server, rep.LoadBefore)

	if o.has("idle") {
		if rep.Idle, err = runIdle(ctx, o, admin, adminURL, natsURL, golden, w); err != nil {
			return nil, fmt.Errorf("idle: %w", err)
		}
	}
	if o.has("fair") {
		if rep.Fair, err = runFair(ctx, o, admin, adminURL, natsURL, w); err != nil {
			return nil, fmt.Errorf("fair: %w", err)
		}
	}
	rep.LoadAfter = loadavg()
	printManyTables(w, rep)
	if o.JSON != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(o.JSON, append(data, '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// migrateSchemas migrates each schema of the contender's database with
// the binary (RELAY_SCHEMA=s outbox-relay migrate), four at a time.
func migrateSchemas(ctx context.Context, bin string, c *contender, schemas []string) error {
	sem := make(chan struct{}, 4)
	errs := make(chan error, len(schemas))
	var wg sync.WaitGroup
	for _, s := range schemas {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := exec.CommandContext(ctx, bin, "migrate")
			cmd.Env = append(baseEnv(c, ""), "RELAY_SCHEMA="+s)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("migrate %s: %w\n%s", s, err, out)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// snapshot is what the idle part reads at both ends of a window.
type snapshot struct {
	at          time.Time
	stmts       map[int64]stmtRow
	xacts       int64
	pgCPU, proc time.Duration
	claims      float64
}

func takeSnapshot(ctx context.Context, admin *pgxpool.Pool, db string, pg *bench.PostgresCPU, c *contender) (snapshot, error) {
	s := snapshot{stmts: map[int64]stmtRow{}}
	rows, err := admin.Query(ctx, `
SELECT s.queryid, s.query, s.calls, s.total_exec_time
  FROM pg_stat_statements AS s JOIN pg_catalog.pg_database AS d ON d.oid = s.dbid
 WHERE d.datname = $1`, db)
	if err != nil {
		return s, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	for rows.Next() {
		var r stmtRow
		if err := rows.Scan(&r.QueryID, &r.Query, &r.Calls, &r.ExecMs); err != nil {
			rows.Close()
			return s, err
		}
		s.stmts[r.QueryID] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, err
	}
	if err := admin.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_catalog.pg_stat_database WHERE datname = $1", db).Scan(&s.xacts); err != nil {
		return s, err
	}
	if pg != nil {
		s.pgCPU, _ = pg.Used()
	}
	if c != nil {
		s.proc, _ = bench.ProcessCPU(c.proc.Process.Pid)
		h, err := scrapeClaims(ctx, c.metrics)
		if err != nil {
			return s, err
		}
		s.claims = h.count
	}
	s.at = time.Now()
	return s, nil
}

// connections counts the client connections to db.
func connections(ctx context.Context, admin *pgxpool.Pool, db string) (int, error) {
	var n int
	err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'", db).Scan(&n)
	return n, err
}

// runIdle measures the server alone, then each idle configuration.
func runIdle(ctx context.Context, o manyOptions, admin *pgxpool.Pool, adminURL, natsURL string, golden map[string]string, w io.Writer) ([]idleResult, error) {
	url, err := databaseURL(adminURL, manyIdleDB)
	if err != nil {
		return nil, err
	}
	schemas := make([]string, o.Outboxes)
	for i := range schemas {
		schemas[i] = tenantSchema(i)
	}
	base := &contender{Name: "migrate", Kind: "relay", DB: manyIdleDB, url: url, nats: natsURL, prefix: idlePrefix}
	began := time.Now()
	if err := migrateSchemas(ctx, o.Binary, base, schemas); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "\nA. idle: %d empty outboxes migrated in %s (schemas %s … %s); each configuration: %s warm-up, then %s measured\n",
		o.Outboxes, time.Since(began).Round(100*time.Millisecond), schemas[0], schemas[len(schemas)-1], o.Warmup, o.Duration)
	pg, err := bench.NewPostgresCPU(ctx, admin)
	if err != nil {
		fmt.Fprintf(w, "PostgreSQL CPU not measured: %v\n", err)
	}
	re := schemaPattern(schemas)
	var out []idleResult
	if o.Baseline > 0 {
		before, err := takeSnapshot(ctx, admin, manyIdleDB, pg, nil)
		if err != nil {
			return nil, err
		}
		if err := sleepCtx(ctx, o.Baseline); err != nil {
			return nil, err
		}
		after, err := takeSnapshot(ctx, admin, manyIdleDB, pg, nil)
		if err != nil {
			return nil, err
		}
		r := idleFigures("no relay (the server alone)", nil, before, after, re, golden)
		out = append(out, r)
		fmt.Fprintf(w, "  %s\n", r.line())
	}
	for _, cfg := range idleConfigs(o.Outboxes) {
		r, err := runIdleConfig(ctx, o, admin, pg, url, natsURL, cfg, re, golden)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.name, err)
		}
		out = append(out, r)
		fmt.Fprintf(w, "  %s\n", r.line())
	}
	return out, nil
}

func runIdleConfig(ctx context.Context, o manyOptions, admin *pgxpool.Pool, pg *bench.PostgresCPU, url, natsURL string, cfg idleConfig, re *regexp.Regexp, golden map[string]string) (idleResult, error) {
	c := &contender{Name: cfg.name, Kind: "relay", DB: manyIdleDB, url: url, nats: natsURL, prefix: idlePrefix, env: cfg.env}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := launchRelay(ctx, runCtx, o.Binary, c, "MANY_IDLE"); err != nil {
		return idleResult{}, err
	}
	defer stopProcess(c, 60*time.Second)
	if _, err := awaitServed(ctx, c, cfg.outboxes, 2*time.Minute); err != nil {
		return idleResult{}, err
	}
	if err := sleepCtx(ctx, o.Warmup); err != nil {
		return idleResult{}, err
	}
	before, err := takeSnapshot(ctx, admin, manyIdleDB, pg, c)
	if err != nil {
		return idleResult{}, err
	}
	maxConns := 0
	end := before.at.Add(o.Duration)
	for time.Now().Before(end) {
		if err := sleepCtx(ctx, min(sampleConnsE, time.Until(end))); err != nil {
			return idleResult{}, err
		}
		if err := exitedEarly([]*contender{c}); err != nil {
			return idleResult{}, err
		}
		n, err := connections(ctx, admin, manyIdleDB)
		if err != nil {
			return idleResult{}, err
		}
		maxConns = max(maxConns, n)
	}
	after, err := takeSnapshot(ctx, admin, manyIdleDB, pg, c)
	if err != nil {
		return idleResult{}, err
	}
	conns, err := connections(ctx, admin, manyIdleDB)
	if err != nil {
		return idleResult{}, err
	}
	served, _ := awaitServed(ctx, c, 0, time.Second)
	r := idleFigures(cfg.name, cfg.env, before, after, re, golden)
	r.Outboxes, r.Connections, r.ConnectionsMax = served, conns, max(maxConns, conns)
	return r, nil
}

// idleFigures computes a window's figures from its two snapshots.
func idleFigures(name string, env []string, before, after snapshot, re *regexp.Regexp, golden map[string]string) idleResult {
	secs := after.at.Sub(before.at).Seconds()
	r := idleResult{Name: name, Env: env, WindowS: math.Round(secs*10) / 10, Load: loadavg()}
	groups, calls, execMs := groupStatements(before.stmts, after.stmts, secs, re, golden)
	r.Top = groups
	r.StatementsPerS = float64(calls) / secs
	r.ExecMsPerS = execMs / secs
	r.TransactionsPerS = float64(after.xacts-before.xacts) / secs
	r.ClaimsPerS = (after.claims - before.claims) / secs
	r.PostgresCPUPct = (after.pgCPU - before.pgCPU).Seconds() / secs * 100
	r.RelayCPUPct = (after.proc - before.proc).Seconds() / secs * 100
	return r
}

// awaitServed waits until the relay's /metrics report claims for want
// outboxes and its /readyz answers 200, and returns how many it serves.
func awaitServed(ctx context.Context, c *contender, want int, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	readyz := strings.TrimSuffix(c.metrics, "/metrics") + "/readyz"
	for {
		text, err := scrapeText(ctx, c.metrics)
		n := schemasServed(text)
		if err == nil && n >= want && httpOK(ctx, readyz) {
			return n, nil
		}
		if err := exitedEarly([]*contender{c}); err != nil {
			return n, err
		}
		if time.Now().After(deadline) {
			if want == 0 {
				return n, nil
			}
			return n, fmt.Errorf("serves %d outboxes after %s, want %d (or /readyz not 200)", n, limit, want)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return n, err
		}
	}
}

func scrapeText(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(data), err
}

func httpOK(ctx context.Context, url string) bool {
	_, err := scrapeText(ctx, url)
	return err == nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// runFair runs the fairness part.
func runFair(ctx context.Context, o manyOptions, admin *pgxpool.Pool, adminURL, natsURL string, w io.Writer) (*fairResult, error) {
	url, err := databaseURL(adminURL, manyFairDB)
	if err != nil {
		return nil, err
	}
	c := &contender{Name: "fair", Kind: "relay", DB: manyFairDB, url: url, nats: natsURL, prefix: fairPrefix,
		env: []string{"RELAY_SCHEMAS=hot,cold"}}
	if err := migrateSchemas(ctx, o.Binary, c, []string{"hot", "cold"}); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	began := time.Now()
	if err := preloadHot(ctx, pool, o); err != nil {
		return nil, fmt.Errorf("preload: %w", err)
	}
	fmt.Fprintf(w, "\nB. fairness: %d rows due in schema hot (loaded in %s), a trickle of %g rows/s into schema cold, one relay (RELAY_SCHEMAS=hot,cold, defaults)\n",
		o.Backlog, time.Since(began).Round(100*time.Millisecond), o.TrickleRate)

	tr := &trickle{}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	sub, err := nc.Subscribe(fairPrefix+coldTopic, func(m *nats.Msg) {
		now := time.Now()
		if seq, err := strconv.Atoi(m.Header.Get("trace-id")); err == nil {
			tr.received(seq, now)
		}
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := launchRelay(ctx, runCtx, o.Binary, c, "MANY_FAIR"); err != nil {
		return nil, err
	}
	defer stopProcess(c, 60*time.Second)
	if _, err := awaitServed(ctx, c, 2, time.Minute); err != nil {
		return nil, err
	}
	r := &fairResult{Backlog: o.Backlog, TrickleRate: o.TrickleRate}
	ready := time.Now()
	r.ReadyS = ready.Sub(c.startedAt).Seconds()
	trCtx, stopTrickle := context.WithCancel(ctx)
	defer stopTrickle()
	trDone := make(chan error, 1)
	go func() { trDone <- tr.run(trCtx, pool, o.TrickleRate, o.PayloadBytes) }()
	r.TrickleStart = time.Since(c.startedAt).Seconds()

	drain, _, err := untilDrained(ctx, pool, bench.Options{Schema: "hot"}, c.startedAt)
	if err != nil {
		return nil, err
	}
	drained := c.startedAt.Add(drain)
	r.DrainS, r.DrainPerS = drain.Seconds(), float64(o.Backlog)/drain.Seconds()
	r.LoadDuring = loadavg()
	fmt.Fprintf(w, "  hot drained in %.1f s after exec (%.0f rows/s); the trickle goes on alone for %s (load %s)\n", r.DrainS, r.DrainPerS, o.TrickleAlone, r.LoadDuring)
	// The alone span starts a second after the drain: hot's last rows
	// settle, its loop backs off.
	aloneFrom := drained.Add(time.Second)
	if err := sleepCtx(ctx, time.Until(aloneFrom.Add(o.TrickleAlone))); err != nil {
		return nil, err
	}
	// On a busy machine the trickle falls behind its rate (CI once saw 3
	// rows in a 2 s span at 20 rows/s): the span goes on, a minute at most,
	// until it holds minAloneRows rows, so that its latencies are not those
	// of two or three rows.
	for giveUp := time.Now().Add(time.Minute); tr.committed(aloneFrom) < minAloneRows && time.Now().Before(giveUp); {
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	aloneTo := time.Now()
	stopTrickle()
	if err := <-trDone; err != nil {
		return nil, fmt.Errorf("trickle: %w", err)
	}
	// Wait for the last rows (up to 10 s).
	for i := 0; i < 100 && tr.missing(aloneTo) > 0; i++ {
		_ = sleepCtx(ctx, 100*time.Millisecond)
	}
	if err := exitedEarly([]*contender{c}); err != nil {
		return nil, err
	}
	rows := tr.snapshot()
	r.Beside = trickleLatencies(rows, ready, drained)
	r.Alone = trickleLatencies(rows, aloneFrom, aloneTo)
	if r.Alone.P99Ms > 0 {
		r.P99Ratio = r.Beside.P99Ms / r.Alone.P99Ms
	}
	if r.Alone.P50Ms > 0 {
		r.P50Ratio = r.Beside.P50Ms / r.Alone.P50Ms
	}
	r.StreamMsgs, _ = bench.StreamMessages(ctx, natsURL, "MANY_FAIR")
	return r, nil
}

// preloadHot copies o.Backlog rows, all due, into hot.messages and
// analyzes the table.
func preloadHot(ctx context.Context, pool *pgxpool.Pool, o manyOptions) error {
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= o.Backlog {
			return nil, nil
		}
		i++
		return []any{hotTopic, bench.Payload(int64(i), o.PayloadBytes), map[string]string{"event-type": "order.created"}}, nil
	})
	n, err := pool.CopyFrom(ctx, pgx.Identifier{"hot", "messages"}, []string{"topic", "payload", "headers"}, src)
	if err != nil {
		return err
	}
	if n != int64(o.Backlog) {
		return fmt.Errorf("copied %d rows, want %d", n, o.Backlog)
	}
	_, err = pool.Exec(ctx, "ANALYZE hot.messages")
	return err
}

// trickle inserts rows into cold.messages, one per transaction, and
// records when each commit returned and when the row was received.
type trickle struct {
	mu   sync.Mutex
	rows []trickleRow // by sequence number - 1
	// early holds the receipts of rows received before their insert's
	// commit returned and was stored (a loaded machine can leave the
	// trickle's goroutine waiting that long): such a row was received, with
	// no latency to speak of, not missing.
	early map[int]bool
}

func (t *trickle) run(ctx context.Context, pool *pgxpool.Pool, rate float64, payload int) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	const insert = "INSERT INTO cold.messages (topic, payload, headers) VALUES ($1, $2, $3::jsonb)"
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		hdr := map[string]string{"event-type": "order.created", "trace-id": strconv.Itoa(seq)}
		if _, err := pool.Exec(ctx, insert, coldTopic, bench.Payload(int64(seq), payload), hdr); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		t.mu.Lock()
		row := trickleRow{Commit: now}
		if t.early[seq] {
			row.Received = now
			delete(t.early, seq)
		}
		t.rows = append(t.rows, row)
		t.mu.Unlock()
	}
}

func (t *trickle) received(seq int, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// A row received before its commit's time was stored is received at
	// that time (early), not at its receipt's.
	if seq >= 1 && seq <= len(t.rows) && t.rows[seq-1].Received.IsZero() {
		t.rows[seq-1].Received = at
	} else if seq > len(t.rows) {
		if t.early == nil {
			t.early = make(map[int]bool)
		}
		t.early[seq] = true
	}
}

// minAloneRows is the fewest trickle rows the fairness measure takes once
// hot is empty.
const minAloneRows = 20

// committed counts the rows committed at or after from.
func (t *trickle) committed(from time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.rows {
		if !r.Commit.Before(from) {
			n++
		}
	}
	return n
}

// missing counts the rows committed before to not yet received.
func (t *trickle) missing(to time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.rows {
		if r.Commit.Before(to) && r.Received.IsZero() {
			n++
		}
	}
	return n
}

func (t *trickle) snapshot() []trickleRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]trickleRow(nil), t.rows...)
}

func (r idleResult) line() string {
	return fmt.Sprintf("%-52s statements %7.1f/s  transactions %7.1f/s  claims %7.1f/s  PostgreSQL CPU %5.1f%%  exec %6.1f ms/s  relay CPU %5.1f%%  connections %d (max %d)  load %s",
		r.Name, r.StatementsPerS, r.TransactionsPerS, r.ClaimsPerS, r.PostgresCPUPct, r.ExecMsPerS, r.RelayCPUPct, r.Connections, r.ConnectionsMax, r.Load)
}

// printManyTables prints the idle table, each configuration's most run
// statements, and the fairness table.
func printManyTables(w io.Writer, rep *manyReport) {
	fmt.Fprintf(w, "\nload before %s, after %s (2 cores shared with other work); %s; PostgreSQL %s, stock settings\n",
		rep.LoadBefore, rep.LoadAfter, rep.Version, rep.Server)
	if len(rep.Idle) > 0 {
		o := rep.Options
		fmt.Fprintf(w, "\nIdle cost, %d empty outboxes, %s measured after %s of warm-up. Statements: pg_stat_statements calls in the relay's database (BEGIN and COMMIT count); transactions: pg_stat_database xact_commit + xact_rollback; claims: outbox_relay_claim_duration_seconds_count summed over the outboxes; CPU in %% of one core, PostgreSQL's over all its processes.\n\n",
			o.Outboxes, o.Duration, o.Warmup)
		fmt.Fprintln(w, "| configuration | outboxes | statements/s | per outbox | transactions/s | claims/s | PostgreSQL CPU | PostgreSQL exec ms/s | relay CPU | connections |")
		fmt.Fprintln(w, "| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
		for _, r := range rep.Idle {
			per := "—"
			if r.Outboxes > 0 {
				per = fmt.Sprintf("%.2f", r.StatementsPerS/float64(r.Outboxes))
			}
			relayCPU, conns, claims := "—", "—", "—"
			if r.Env != nil {
				relayCPU = fmt.Sprintf("%.1f%%", r.RelayCPUPct)
				conns = strconv.Itoa(r.Connections)
				if r.ConnectionsMax != r.Connections {
					conns += fmt.Sprintf(" (max %d)", r.ConnectionsMax)
				}
				claims = fmt.Sprintf("%.1f", r.ClaimsPerS)
			}
			fmt.Fprintf(w, "| %s | %d | %.1f | %s | %.1f | %s | %.1f%% | %.1f | %s | %s |\n",
				r.Name, r.Outboxes, r.StatementsPerS, per, r.TransactionsPerS, claims, r.PostgresCPUPct, r.ExecMsPerS, relayCPU, conns)
		}
		fmt.Fprintln(w, "\nMost run statements (calls/s, summed over the outboxes; named after the relay's golden statements, relay/testdata):")
		for _, r := range rep.Idle {
			if r.Env == nil {
				continue
			}
			var parts []string
			for _, g := range r.Top[:min(6, len(r.Top))] {
				parts = append(parts, fmt.Sprintf("%s %.1f", g.Label, g.CallsPerS))
			}
			fmt.Fprintf(w, "  %s: %s\n", r.Name, strings.Join(parts, "; "))
		}
	}
	if f := rep.Fair; f != nil {
		fmt.Fprintf(w, "\nFairness: %d rows due in schema hot, a trickle of %g rows/s (one per transaction) into schema cold, one relay (RELAY_SCHEMAS=hot,cold, defaults). Latency: the trickle row's commit returning → its receipt by a NATS subscriber (as JetStream stores it). Hot drained in %.1f s after exec (%.0f rows/s), the relay ready after %.1f s.\n\n",
			f.Backlog, f.TrickleRate, f.DrainS, f.DrainPerS, f.ReadyS)
		fmt.Fprintln(w, "| trickle into cold | rows | p50 | p99 | max | not received |")
		fmt.Fprintln(w, "| --- | --: | --: | --: | --: | --: |")
		for _, s := range []struct {
			name string
			l    latencyStats
		}{{fmt.Sprintf("beside hot's backlog (while it drains, %.0f s)", f.DrainS-f.TrickleStart), f.Beside}, {fmt.Sprintf("hot empty (%s)", rep.Options.TrickleAlone), f.Alone}} {
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %d |\n", s.name, s.l.Rows, latMs(s.l.Rows, s.l.P50Ms), latMs(s.l.Rows, s.l.P99Ms), latMs(s.l.Rows, s.l.MaxMs), s.l.Missing)
		}
		fmt.Fprintf(w, "\ntrickle beside the backlog / hot empty: p50 %.1f×, p99 %.1f×; messages in the stream %d (want %d + the trickle's)\n",
			f.P50Ratio, f.P99Ratio, f.StreamMsgs, f.Backlog)
	}
}

func latMs(rows int, v float64) string {
	if rows == 0 {
		return "—"
	}
	return ms(v)
}
