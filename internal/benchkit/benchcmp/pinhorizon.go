package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/bench"
)

// The pinned-horizon benchmark (-pin-horizon, issue 21): the relay binary
// with its defaults and refloop, each on a database of its own with a
// steady producer, while sessions pin the horizon of some of the databases
// (the pin is per database: PostgreSQL computes the horizon of a table
// from the sessions of its database), one of three ways (-pin-how, pin): a
// REPEATABLE READ transaction holding its snapshot, an idle transaction
// holding a transaction id, or REPEATABLE READ readers scanning the outbox
// in a loop. Every interval it samples each database's hot table (dead
// tuples, rows in it), the archive's dead tuples, the disk its tables
// take, the claim statements' calls, time and buffers from
// pg_stat_statements, the rows produced and archived, and, for the relays,
// the claim histogram of their /metrics and commit → receipt latency on
// their stream; it prints the table and the pinned / unpinned
// ratios.

// pinOptions configure a pinned-horizon run.
type pinOptions struct {
	Binary  string // the outbox-relay binary, run with its defaults
	Refloop string // the refloop binary; empty runs the relays alone
	// RefloopUnpinned also runs refloop on an unpinned database (a fourth
	// producer on the machine).
	RefloopUnpinned bool
	// PGURL, when set, is an existing server (its database is the one the
	// benchmark connects to for administration); otherwise the benchmark
	// starts its own with initdb from PGBin (found when empty) on PGPort.
	PGURL  string
	PGBin  string
	PGPort int
	// PGConf are more settings (name=value) of the benchmark's own
	// servers (-pg-conf), for a diagnosis such as auto_explain.
	PGConf []string
	// ServerEach runs the unpinned contenders on a second server of the
	// benchmark's own (-server-each; the default with -pin-how xid): a
	// transaction id held open holds the horizon of every database of its
	// server, so on one server nothing would stay unpinned. Not with PGURL.
	ServerEach bool
	// NatsURL, when set, is the NATS server of the relays (each publishes
	// to a stream of its own); otherwise each contender gets a JetStream
	// server in process. Refloop always gets its own in-process server: its
	// stream name is fixed.
	NatsURL  string
	Duration time.Duration
	Every    time.Duration
	PinAfter time.Duration
	// PinFor is how long the pin is held; zero: to the end of the run.
	PinFor       time.Duration
	Rate         float64 // rows per second per database, one per transaction
	Producers    int     // producer connections per database
	PayloadBytes int
	JSON         string // write the report there as JSON when set
	// Mode, when set, is the relays' RELAY_MODE (ordered, partitioned);
	// the producers then give each row one of Keys keys, round robin.
	Mode string
	Keys int
	// Grace is how long refloop may take after the producers stopped to
	// deliver the rest and print its line (default 30s).
	Grace time.Duration
	// PinHow is how the pinned databases' horizon is pinned (-pin-how):
	// pinHowSnapshot (the default when empty), pinHowXID or pinHowReaders.
	PinHow string
	// RelayEnv are settings (NAME=value) every relay runs with besides
	// its defaults (-relay-env), as RELAY_ARCHIVE_RETENTION=5m.
	RelayEnv []string
}

// The ways -pin-how pins the horizon of the pinned databases (pin).
const (
	pinHowSnapshot = "snapshot" // a REPEATABLE READ transaction holding its snapshot
	pinHowXID      = "xid"      // an idle transaction holding a transaction id
	pinHowReaders  = "readers"  // REPEATABLE READ readers scanning the outbox in a loop
)

// pinReaders is the number of readers -pin-how readers runs in each pinned
// database, and readerPause their pause between two read transactions,
// which keeps them from taking the CPU alone.
const (
	pinReaders  = 4
	readerPause = 50 * time.Millisecond
)

// pinLabel names a way of pinning in the tables and the summary: the
// pinned columns say which pin their figures were measured under.
func pinLabel(how string) string {
	switch how {
	case pinHowXID:
		return "idle xid"
	case pinHowReaders:
		return strconv.Itoa(pinReaders) + " RR readers"
	}
	return "held snapshot"
}

func (o pinOptions) validate() error {
	switch {
	case o.Binary == "":
		return errors.New("-pin-horizon needs -binary, the outbox-relay binary (make build writes bin/outbox-relay)")
	case o.Duration <= 0 || o.Every <= 0 || o.Every > o.Duration:
		return fmt.Errorf("-duration %s, -every %s: want 0 < every <= duration", o.Duration, o.Every)
	case o.PinAfter < 0 || o.PinAfter >= o.Duration:
		return fmt.Errorf("-pin-after %s: want from 0 to less than -duration %s", o.PinAfter, o.Duration)
	case o.PinFor < 0 || o.PinFor > 0 && o.PinAfter+o.PinFor >= o.Duration:
		return fmt.Errorf("-pin-for %s: want 0 (to the end) or to end before -duration %s", o.PinFor, o.Duration)
	case o.Rate <= 0 || o.Producers < 1 || o.PayloadBytes < 1:
		return errors.New("-rate, -producers and -payload must be positive")
	case o.ServerEach && o.PGURL != "":
		return errors.New("-server-each starts two servers of the benchmark's own: leave -pg-url unset")
	}
	switch o.PinHow {
	case "", pinHowSnapshot, pinHowXID, pinHowReaders:
	default:
		return fmt.Errorf("-pin-how %q: want %s, %s or %s", o.PinHow, pinHowSnapshot, pinHowXID, pinHowReaders)
	}
	for _, bin := range []string{o.Binary, o.Refloop} {
		if bin == "" {
			continue
		}
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%w (make bench-pin-horizon builds bin/outbox-relay and bin/refloop; -refloop '' runs without refloop)", err)
		}
	}
	return nil
}

// contender is one database of the run: a relay or refloop, pinned or not.
type contender struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"` // relay | refloop
	Pinned bool   `json:"pinned"`
	DB     string `json:"database"`

	url                      string
	admin                    *pgxpool.Pool // its server's administration pool
	hotSchema, hot, archived string        // the hot table and the archive
	tables                   []string      // those of hotSchema whose disk a sample sums (tableStats)
	nats                     string        // its NATS server
	prefix                   string        // the relay's NATS_SUBJECT_PREFIX
	env                      []string      // settings of its own (relayEnv)
	metrics                  string        // the relay's /metrics
	proc                     *exec.Cmd
	startedAt                time.Time // just before its exec
	exited                   chan error
	stdout                   bytes.Buffer // refloop's result line
	stats                    *pgxpool.Pool
	receipts                 *receipts
	prev                     counters
	reads                    atomic.Int64  // read transactions the pin's readers committed
	Samples                  []pinSample   `json:"samples"`
	Refloop                  *bench.Result `json:"refloop_result,omitempty"`
	CommitReceiptP99Ms       *float64      `json:"commit_receipt_p99_ms_whole_run,omitempty"`
	// PinReads is, with -pin-how readers, the read transactions its
	// readers committed by the last sample.
	PinReads int64 `json:"pin_reads,omitempty"`
}

// pinSample is what one interval measured on one contender.
type pinSample struct {
	AfterS          float64 `json:"after_s"`
	PinHeld         bool    `json:"pin_held"`
	DeadTuples      int64   `json:"dead_tuples"`
	RowsInTable     int64   `json:"rows_in_table"` // the backlog, n_live_tup
	Produced        int64   `json:"produced"`
	Delivered       int64   `json:"delivered"` // rows archived in the interval
	Claims          int64   `json:"claims"`
	ClaimMeanMs     float64 `json:"claim_mean_ms"`
	BuffersPerClaim float64 `json:"buffers_per_claim"`
	XminAge         int64   `json:"oldest_xmin_age"` // of its sessions' xmin and xid: how far the horizon lags
	// ArchiveDeadTuples are the archive's dead tuples, summed over its
	// partitions (rows deleted, inserts rolled back): vacuum cannot
	// remove them under a pin any more than the hot table's (DeadTuples).
	ArchiveDeadTuples int64 `json:"archive_dead_tuples"`
	// TablesDiskBytes is the disk the contender's tables take at the
	// sample (contender.tables, each summed over its partitions, with
	// their indexes and TOAST): what the pin costs in space.
	TablesDiskBytes int64 `json:"tables_disk_bytes"`
	// The relay's claim p99 from its histogram (claim round trip) and
	// commit → receipt p99 from its stream; absent for refloop.
	ClaimP99Ms *float64 `json:"claim_p99_ms,omitempty"`
	// ClaimP99AboveBuckets says the p99 lies past the histogram's last
	// finite bucket, whose bound ClaimP99Ms then holds.
	ClaimP99AboveBuckets bool     `json:"claim_p99_above_buckets,omitempty"`
	CommitReceiptP99Ms   *float64 `json:"commit_receipt_p99_ms,omitempty"`
}

// counters are the cumulative figures a sample subtracts.
type counters struct {
	dead, live, hotIns, hotDel, xminAge int64
	archDead, diskBytes                 int64
	calls, blocks                       int64
	execMs                              float64
	hist                                histogram
}

// pinReport is the run, as -json writes it.
type pinReport struct {
	StartedAt   string       `json:"started_at"`
	Version     string       `json:"relay_version"`
	Server      string       `json:"server_version"`
	LoadBefore  string       `json:"load_before"`
	LoadAfter   string       `json:"load_after"`
	Options     pinOptions   `json:"options"`
	Contenders  []*contender `json:"contenders"`
	SummaryLine string       `json:"summary"`
}

const (
	pinDBPrefix = "outbox_pin_"
	pinMarker   = "outbox-relay benchcmp -pin-horizon scratch database: dropped by its runs"
	pinTopic    = "bench.outbox.events"
)

// runPinHorizon runs the benchmark and writes its tables to w.
func runPinHorizon(ctx context.Context, o pinOptions, w io.Writer) (*pinReport, error) {
	if o.PinHow == "" {
		o.PinHow = pinHowSnapshot
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.Grace = max(o.Grace, 30*time.Second)
	rep := &pinReport{StartedAt: time.Now().UTC().Format(time.RFC3339), Options: o, LoadBefore: loadavg()}
	if out, err := exec.CommandContext(ctx, o.Binary, "version").Output(); err == nil {
		rep.Version = strings.TrimSpace(string(out))
	}

	adminURL, admin, stopServer, err := openServer(ctx, o.PGURL, o.PGBin, o.PGPort, o.PGConf, w, &rep.Server)
	if err != nil {
		return nil, err
	}
	defer stopServer()
	// With ServerEach the unpinned contenders get a server of their own.
	unpinnedURL, unpinnedAdmin := adminURL, admin
	if o.ServerEach {
		var stop func()
		port := o.PGPort
		if port != 0 {
			port++
		}
		unpinnedURL, unpinnedAdmin, stop, err = openServer(ctx, "", o.PGBin, port, o.PGConf, w, new(string))
		if err != nil {
			return nil, fmt.Errorf("the unpinned contenders' server (-server-each): %w", err)
		}
		defer stop()
		fmt.Fprintln(w, "the unpinned contenders run on the second server (-server-each), the pinned ones on the first")
	}

	cs := []*contender{
		{Name: "relay unpinned", Kind: "relay"},
		{Name: "relay pinned", Kind: "relay", Pinned: true},
	}
	if o.Refloop != "" {
		cs = append(cs, &contender{Name: "refloop pinned", Kind: "refloop", Pinned: true})
		if o.RefloopUnpinned {
			cs = append(cs, &contender{Name: "refloop unpinned", Kind: "refloop"})
		}
	}
	rep.Contenders = cs
	for _, c := range cs {
		if c.Kind == "relay" && o.Mode != "" {
			c.env = append(c.env, "RELAY_MODE="+o.Mode)
		}
		if c.Kind == "relay" {
			c.env = append(c.env, o.RelayEnv...)
		}
		slug := strings.ReplaceAll(c.Name, " ", "_")
		c.DB = pinDBPrefix + slug
		base := adminURL
		c.admin = admin
		if !c.Pinned {
			base, c.admin = unpinnedURL, unpinnedAdmin
		}
		if c.url, err = databaseURL(base, c.DB); err != nil {
			return nil, err
		}
		c.hotSchema, c.hot, c.archived, c.tables = "outbox", "messages_all", "archive", slices.Clone(relayTables)
		if c.Kind == "refloop" {
			// Refloop has no table but these two.
			c.hotSchema, c.hot, c.archived = "public", "outbox", "outbox_archive"
			c.tables = []string{c.hot, c.archived}
		}
		c.prefix = "pin." + slug + "."
	}
	for _, server := range servers(cs) {
		var dbs []string
		for _, c := range cs {
			if c.admin == server {
				dbs = append(dbs, c.DB)
			}
		}
		if err := createDatabases(ctx, server, dbs, pinMarker); err != nil {
			return nil, err
		}
		defer dropDatabases(server, dbs)
	}

	// NATS: a server per contender in process unless the relays have one.
	storeRoot, err := os.MkdirTemp("", "outbox-pin-nats-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(storeRoot)
	for i, c := range cs {
		if c.Kind == "relay" && o.NatsURL != "" {
			c.nats = o.NatsURL
			continue
		}
		ns, err := startNATS(filepath.Join(storeRoot, strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		defer ns.Shutdown()
		c.nats = ns.ClientURL()
	}

	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	n := int(o.Rate*o.Duration.Seconds()) + 1
	for _, c := range cs {
		c.stats, err = pgxpool.New(ctx, c.url)
		if err != nil {
			return nil, err
		}
		defer c.stats.Close()
		if c.Kind != "relay" {
			continue
		}
		c.receipts = newReceipts(n)
		if err := startRelay(ctx, runCtx, o.Binary, c); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		defer stopProcess(c, 60*time.Second)
		sub, err := subscribe(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		defer sub.Close()
	}

	// Refloop produces on its own clock from its start: start it last,
	// just before the relays' producers.
	for _, c := range cs {
		if c.Kind == "refloop" {
			if err := startRefloop(runCtx, o, c); err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			defer stopProcess(c, 5*time.Second)
		}
	}
	t0 := time.Now()
	prodCtx, stopProducers := context.WithDeadline(runCtx, t0.Add(o.Duration))
	defer stopProducers()
	produced := make(chan error, len(cs))
	producers := 0
	for _, c := range cs {
		if c.Kind == "relay" {
			producers++
			go func() { produced <- produce(prodCtx, o, c) }()
		}
	}
	if err := sampleAll(ctx, cs, 0, false, nil); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "%d contenders, %g rows/s each (%d producer connections, one row per transaction, %d-byte payloads), pin after %s, for %s; load %s\n",
		len(cs), o.Rate, o.Producers, o.PayloadBytes, o.PinAfter, o.Duration, rep.LoadBefore)
	if o.Mode != "" {
		fmt.Fprintf(w, "relays in RELAY_MODE=%s, rows spread over %d keys\n", o.Mode, o.Keys)
	}

	// The pin holds until the end of the run, refloop's grace included,
	// or for -pin-for.
	var hold *pinHold
	defer func() { hold.release(context.WithoutCancel(ctx)) }()
	pinAt := time.NewTimer(time.Until(t0.Add(o.PinAfter)))
	defer pinAt.Stop()
	var pinEnd <-chan time.Time
	pinned := false
	for next := o.Every; ; next += o.Every {
		at := min(next, o.Duration)
		tick := time.NewTimer(time.Until(t0.Add(at)))
	wait:
		for {
			select {
			case <-ctx.Done():
				tick.Stop()
				return nil, ctx.Err()
			case err := <-produced:
				if err != nil {
					tick.Stop()
					return nil, fmt.Errorf("producer: %w", err)
				}
				producers--
			case <-pinAt.C:
				if hold, err = pin(ctx, o.PinHow, cs, os.Stderr); err != nil {
					tick.Stop()
					return nil, err
				}
				pinned = true
				fmt.Fprintf(w, "pin (%s) held from %s in %s\n", pinLabel(o.PinHow), time.Since(t0).Round(time.Second), pinnedNames(cs))
				if o.PinFor > 0 {
					end := time.NewTimer(time.Until(t0.Add(o.PinAfter + o.PinFor)))
					defer end.Stop()
					pinEnd = end.C
				}
				if o.PinHow == pinHowXID && !o.ServerEach {
					fmt.Fprintln(w, "note: a running xid is in every snapshot the server takes, so the unpinned databases' snapshots hold it as their xmin too (pinXID)")
				}
			case <-pinEnd:
				hold.release(context.WithoutCancel(ctx))
				hold, pinned, pinEnd = nil, false, nil
				fmt.Fprintf(w, "pin released at %s\n", time.Since(t0).Round(time.Second))
			case <-tick.C:
				break wait
			}
			if err := exitedEarly(cs); err != nil {
				return nil, err
			}
		}
		if err := sampleAll(ctx, cs, time.Since(t0), pinned, w); err != nil {
			return nil, err
		}
		if at >= o.Duration {
			break
		}
	}
	for ; producers > 0; producers-- {
		if err := <-produced; err != nil {
			return nil, fmt.Errorf("producer: %w", err)
		}
	}
	rep.LoadAfter = loadavg()
	for _, c := range cs {
		c.PinReads = c.reads.Load()
	}

	// Refloop delivers the rest and prints its line; the relays stop.
	for _, c := range cs {
		switch c.Kind {
		case "relay":
			c.CommitReceiptP99Ms = c.receipts.wholeRun()
		case "refloop":
			c.Refloop = awaitRefloop(ctx, c, o.Grace)
		}
	}
	printPinTables(w, cs, rep)
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

// servers are the administration pools of cs's servers, each once.
func servers(cs []*contender) []*pgxpool.Pool {
	var out []*pgxpool.Pool
	for _, c := range cs {
		if !slices.Contains(out, c.admin) {
			out = append(out, c.admin)
		}
	}
	return out
}

// openServer returns the administration URL and a pool of the server a
// benchmark runs on: pgURL, or a server of its own started with initdb
// from pgBin on pgPort with the settings conf added, which stop stops and deletes (stop closes the pool
// in either case). The server is checked (checkServer) and its version
// stored in version.
func openServer(ctx context.Context, pgURL, pgBin string, pgPort int, conf []string, w io.Writer, version *string) (adminURL string, admin *pgxpool.Pool, stop func(), err error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	adminURL = pgURL
	if adminURL == "" {
		bin, err := findPostgresBin(pgBin)
		if err != nil {
			return "", nil, nil, err
		}
		pg, err := startTempPostgres(ctx, bin, pgPort, conf)
		if err != nil {
			return "", nil, nil, fmt.Errorf("start PostgreSQL: %w", err)
		}
		stops = append(stops, pg.stop)
		adminURL = pg.url("postgres")
		fmt.Fprintf(w, "PostgreSQL from %s on port %d, stock settings but %s\n", bin, pg.port, strings.Join(append(postgresConf(pg.port, pg.dir)[3:], conf...), ", "))
	}
	admin, err = pgxpool.New(ctx, adminURL)
	if err != nil {
		return "", nil, nil, err
	}
	stops = append(stops, admin.Close)
	if err := checkServer(ctx, admin, w, version); err != nil {
		return "", nil, nil, err
	}
	return adminURL, admin, stopAll, nil
}

// checkServer reads the server's version, makes pg_stat_statements
// readable (it must be preloaded) and warns when autovacuum is off, which
// is not what the benchmark means to measure.
func checkServer(ctx context.Context, admin *pgxpool.Pool, w io.Writer, version *string) error {
	var autovacuum, preload string
	if err := admin.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('autovacuum'), current_setting('shared_preload_libraries')").
		Scan(version, &autovacuum, &preload); err != nil {
		return err
	}
	if !strings.Contains(preload, "pg_stat_statements") {
		return fmt.Errorf("the server does not preload pg_stat_statements (shared_preload_libraries = %q): the claim times come from it; leave -pg-url unset to start a server of the benchmark's own", preload)
	}
	if _, err := admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return fmt.Errorf("create extension pg_stat_statements: %w", err)
	}
	if autovacuum != "on" {
		fmt.Fprintln(w, "warning: autovacuum is off on this server: dead tuples pile up pinned or not, and the comparison means little")
	}
	return nil
}

// databaseURL is base with its database replaced by db.
func databaseURL(base, db string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("-pg-url: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

// createDatabases creates each database with a marker (a comment),
// dropping an earlier run's (one that carries the marker) and refusing
// to touch one that does not.
func createDatabases(ctx context.Context, admin *pgxpool.Pool, dbs []string, marker string) error {
	for _, db := range dbs {
		var comment *string
		err := admin.QueryRow(ctx, "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", db).Scan(&comment)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case comment == nil || *comment != marker:
			return fmt.Errorf("database %s exists and was not made by this benchmark: drop or rename it yourself", db)
		default:
			if _, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
				return err
			}
		}
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
			return err
		}
		if _, err := admin.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{db}.Sanitize()+" IS '"+marker+"'"); err != nil {
			return err
		}
	}
	return nil
}

func dropDatabases(admin *pgxpool.Pool, dbs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, db := range dbs {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
	}
}

// startNATS starts a JetStream server in process, its store in dir.
func startNATS(dir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("the in-process NATS server did not start")
	}
	return ns, nil
}

// relayEnv is the environment the relay runs with: ours without any of
// the relay's settings, so that it runs with its defaults, and the
// database, NATS, a subject prefix, the metrics address and the log level;
// then the contender's own settings (c.env).
func relayEnv(c *contender, metricsAddr string) []string {
	return append(baseEnv(c, metricsAddr), c.env...)
}

// baseEnv is relayEnv without the contender's own settings.
func baseEnv(c *contender, metricsAddr string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "RELAY_"), strings.HasPrefix(name, "NATS_"), strings.HasPrefix(name, "WEBHOOK_"),
			strings.HasPrefix(name, "KAFKA_"), strings.HasPrefix(name, "RABBITMQ_"), strings.HasPrefix(name, "OTEL_"),
			strings.HasPrefix(name, "DATABASE_URL"), name == "LOG_LEVEL", name == "LOG_FORMAT":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "DATABASE_URL="+c.url, "NATS_URL="+c.nats, "NATS_SUBJECT_PREFIX="+c.prefix,
		"RELAY_HTTP_ADDR="+metricsAddr, "LOG_LEVEL=warn")
}

// startRelay migrates the contender's database and creates its stream,
// then starts the relay binary (stopped by runCtx) and waits for its
// /metrics.
func startRelay(ctx, runCtx context.Context, bin string, c *contender) error {
	migrate := exec.CommandContext(ctx, bin, "migrate")
	migrate.Env = relayEnv(c, "")
	if out, err := migrate.CombinedOutput(); err != nil {
		return fmt.Errorf("migrate: %w\n%s", err, out)
	}
	return launchRelay(ctx, runCtx, bin, c, "PIN_"+strings.ToUpper(strings.ReplaceAll(c.Name, " ", "_")))
}

// launchRelay creates the contender's stream, named stream, then starts
// the relay binary (stopped by runCtx) and waits for its /metrics.
func launchRelay(ctx, runCtx context.Context, bin string, c *contender, stream string) error {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(0))
	c.metrics = "http://" + addr + "/metrics"
	env := relayEnv(c, addr)
	if err := createStream(ctx, c.nats, stream, c.prefix+">"); err != nil {
		return err
	}
	cmd := exec.CommandContext(runCtx, bin, "run")
	cmd.Env = env
	cmd.Stderr = prefixed(os.Stderr, c.Name+": ")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 60 * time.Second
	if err := startProcess(c, cmd); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := scrapeClaims(ctx, c.metrics); err == nil {
			return nil
		}
		if err := exitedEarly([]*contender{c}); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("its /metrics did not answer within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startRefloop starts refloop's steady mode on the contender's database:
// its own producers at the same rate, one row per transaction, for the
// run's duration, its two workers claiming batches of 1000 (as make bench
// runs it).
func startRefloop(runCtx context.Context, o pinOptions, c *contender) error {
	n := int(o.Rate * o.Duration.Seconds())
	cmd := exec.CommandContext(runCtx, o.Refloop,
		"-mode", "steady", "-n", strconv.Itoa(n), "-rate", strconv.FormatFloat(o.Rate, 'f', -1, 64),
		"-producers", strconv.Itoa(o.Producers), "-producer-batch", "1", "-payload", strconv.Itoa(o.PayloadBytes),
		"-batch", "1000", "-workers", "2", "-dsn", c.url, "-nats", c.nats,
		"-timeout", (o.Duration + o.Grace + time.Minute).String())
	cmd.Stdout = &c.stdout
	cmd.Stderr = prefixed(os.Stderr, c.Name+": ")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	return startProcess(c, cmd)
}

func startProcess(c *contender, cmd *exec.Cmd) error {
	c.startedAt = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	c.proc, c.exited = cmd, make(chan error, 1)
	go func() { c.exited <- cmd.Wait() }()
	return nil
}

// exitedEarly reports a relay that ended during the run (refloop ends by
// itself once it delivered its rows).
func exitedEarly(cs []*contender) error {
	for _, c := range cs {
		if c.Kind != "relay" || c.exited == nil {
			continue
		}
		select {
		case err := <-c.exited:
			c.exited <- err
			return fmt.Errorf("%s exited during the run: %v", c.Name, err)
		default:
		}
	}
	return nil
}

// stopProcess ends a contender's process with SIGTERM, then SIGKILL after
// wait.
func stopProcess(c *contender, wait time.Duration) {
	if c.proc == nil {
		return
	}
	_ = c.proc.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.exited:
		c.exited <- err
	case <-time.After(wait):
		_ = c.proc.Process.Kill()
	}
}

// awaitRefloop waits up to grace for refloop to deliver the rest and
// print its result line.
func awaitRefloop(ctx context.Context, c *contender, grace time.Duration) *bench.Result {
	select {
	case err := <-c.exited:
		c.exited <- err
	case <-time.After(grace):
		return nil
	case <-ctx.Done():
		return nil
	}
	var r bench.Result
	if json.Unmarshal(bytes.TrimSpace(c.stdout.Bytes()), &r) != nil {
		return nil
	}
	return &r
}

func createStream(ctx context.Context, natsURL, name, subject string) error {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	// A stream deleted just now may still be leaving the server's store
	// directory: creating one of the same name then fails with "error
	// creating store for stream" (seen on a loaded machine, between two
	// configurations of make bench-many-outboxes), so that is tried again
	// for a few seconds.
	for tries := 1; ; tries++ {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Description: pinMarker, Subjects: []string{subject},
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: 1,
		})
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != streamStoreFailed || tries == 20 {
			return err
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// streamStoreFailed is the JetStream API's error code for a stream whose
// store could not be created (JSStreamStoreFailedF).
const streamStoreFailed jetstream.ErrorCode = 10049

// pinHold is a pin in place: the connections whose transactions hold the
// horizon and, with -pin-how readers, the goroutines that run the readers
// on some of them. release ends it.
type pinHold struct {
	conns   []*pgx.Conn
	stop    context.CancelFunc // ends the readers' context
	readers sync.WaitGroup
}

// pin pins the horizon of each pinned contender's database the way how
// says (pinSnapshot, pinXID or startReaders), on connections of its own,
// until the returned hold is released. When one database cannot be
// pinned, what was pinned already is released and the run fails.
func pin(ctx context.Context, how string, cs []*contender, log io.Writer) (*pinHold, error) {
	h := &pinHold{}
	readCtx, stop := context.WithCancel(ctx)
	h.stop = stop
	for _, c := range cs {
		if !c.Pinned {
			continue
		}
		var err error
		switch how {
		case pinHowXID:
			err = h.pinXID(ctx, c)
		case pinHowReaders:
			err = h.startReaders(ctx, readCtx, c, log)
		default:
			err = h.pinSnapshot(ctx, c)
		}
		if err != nil {
			h.release(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("pin %s (-pin-how %s): %w", c.DB, how, err)
		}
	}
	return h, nil
}

// release ends the pin: it stops the readers, waits for them and closes
// every connection of the pin, which ends the transactions that held the
// horizon. A nil hold (no pin yet) has nothing to release.
func (h *pinHold) release(ctx context.Context) {
	if h == nil {
		return
	}
	h.stop()
	h.readers.Wait()
	for _, conn := range h.conns {
		_ = conn.Close(ctx)
	}
}

// connect opens a connection to the contender's database that release
// closes.
func (h *pinHold) connect(ctx context.Context, c *contender) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return nil, err
	}
	h.conns = append(h.conns, conn)
	return conn, nil
}

// pinSnapshot opens a REPEATABLE READ transaction that runs one query,
// which takes its snapshot, and then holds it: the snapshot's xmin holds
// the horizon of the database where it was until release.
func (h *pinHold) pinSnapshot(ctx context.Context, c *contender) error {
	conn, err := h.connect(ctx, c)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	var n int64
	return tx.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_class").Scan(&n)
}

// pinXID opens a READ COMMITTED transaction that takes a transaction id
// (pg_current_xact_id, formerly txid_current) and then sits idle in it
// until release, as an application's BEGIN; SELECT txid_current(); left
// open does. It holds no snapshot between statements, but its running
// xid holds the horizon of its database where it was. The xid is also the
// xmin of every snapshot taken meanwhile in any database, so that it may
// hold the unpinned databases' horizon too while such a snapshot lives.
func (h *pinHold) pinXID(ctx context.Context, c *contender) error {
	conn, err := h.connect(ctx, c)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	var xid string
	return tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid)
}

// startReaders connects pinReaders readers to the contender's database,
// each on a connection of its own, and starts them: until readCtx ends
// (the run's context, or release), each runs REPEATABLE READ read-only
// transactions that scan the hot table and the archive whole, readerPause
// apart, and counts them in c.reads. No snapshot lives long, but the
// horizon stays at the oldest of the readers' snapshots, as it does under
// a reporting job's or analysts' queries, and moves on as they commit. A
// connection that fails fails the pin; a read that fails is logged to log
// once for the database, and the readers go on.
func (h *pinHold) startReaders(ctx, readCtx context.Context, c *contender, log io.Writer) error {
	// pg_column_size reads each row's payload without decoding it: the
	// scan visits every tuple, dead ones included, for little CPU.
	scan := fmt.Sprintf("SELECT count(*), coalesce(sum(pg_column_size(payload)), 0) FROM (SELECT payload FROM %s UNION ALL SELECT payload FROM %s) AS t",
		pgx.Identifier{c.hotSchema, c.hot}.Sanitize(), pgx.Identifier{c.hotSchema, c.archived}.Sanitize())
	var logOnce sync.Once
	for i := range pinReaders {
		conn, err := h.connect(ctx, c)
		if err != nil {
			return err
		}
		h.readers.Go(func() {
			// Staggered, so that their snapshots overlap rather than
			// start and end together.
			pause := time.Duration(i) * readerPause / pinReaders
			for {
				select {
				case <-readCtx.Done():
					return
				case <-time.After(pause):
				}
				pause = readerPause
				err := readWhole(readCtx, conn, scan)
				switch {
				case err == nil:
					c.reads.Add(1)
				case readCtx.Err() == nil:
					logOnce.Do(func() {
						fmt.Fprintf(log, "%s: pin reader: %v (logged once; the readers go on)\n", c.Name, err)
					})
				}
			}
		})
	}
	return nil
}

// readWhole runs one reader's transaction: REPEATABLE READ, read only, the
// scan, then commit.
func readWhole(ctx context.Context, conn *pgx.Conn, scan string) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // after Commit, a no-op
	var rows, bytes int64
	if err := tx.QueryRow(ctx, scan).Scan(&rows, &bytes); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func pinnedNames(cs []*contender) string {
	var names []string
	for _, c := range cs {
		if c.Pinned {
			names = append(names, c.DB)
		}
	}
	return strings.Join(names, ", ")
}

// loadavg is the machine's load (the first three fields of /proc/loadavg).
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}

// prefixed writes each line to w with a prefix.
func prefixed(w io.Writer, prefix string) io.Writer {
	return &linePrefixer{w: w, prefix: prefix}
}

type linePrefixer struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (l *linePrefixer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		fmt.Fprintf(l.w, "%s%s\n", l.prefix, l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}
