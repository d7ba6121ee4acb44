package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Database is one database and the outboxes served in it.
type Database struct {
	// Tenant names it in logs, in the tenant label and in /readyz; empty
	// when the configuration names none.
	Tenant string
	URL    string
	// Schemas are served as listed; Match, when set, is a LIKE pattern
	// whose matching schemas that hold a migrated outbox are served too.
	Schemas []string
	Match   string
	// Owners are the roles trusted to own the schemas Match finds: one is
	// served only when both it and its messages table are owned by one of
	// them (Trust). Empty: the role the relay connects as and the owners
	// of the schemas listed for the same database.
	Owners []string
	// Mode is the mode of its outboxes; empty for Config.Relay's.
	Mode outbox.Mode
}

// Config configures a Fleet.
type Config struct {
	// Databases are served; entries with the same URL share one pool.
	Databases []Database
	// Relay is every outbox's relay configuration but its Schema, Mode
	// (when the database has its own), Metrics, Listener and Logger.
	Relay relay.Config
	// Registerer receives each outbox's metrics, labelled with its schema
	// (and tenant, when named) when Labelled is set.
	Registerer prometheus.Registerer
	Labelled   bool
	// DiscoverEvery is how often databases with a Match are searched.
	DiscoverEvery time.Duration
	// ReadyWhenAny makes the fleet ready while any outbox is, rather than
	// while every one is.
	ReadyWhenAny bool
	// FailFast makes an outbox's failure end Run with its error rather
	// than be retried: for a relay that serves one listed outbox, which
	// should exit on a configuration it cannot run with.
	FailFast bool
	// OpenPool opens a database's pool of at most maxConns connections,
	// with tracer, when not nil, as its pgx.ConnConfig.Tracer (the bound
	// on each outbox's share of a shared pool, share.go); WaitDatabase waits until it answers (logging while it does not);
	// Prepare readies an outbox's schema (migrate, or check its version).
	OpenPool     func(ctx context.Context, url string, maxConns int32, tracer pgx.QueryTracer) (*pgxpool.Pool, error)
	WaitDatabase func(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error
	Prepare      func(ctx context.Context, pool *pgxpool.Pool, schema string, log *slog.Logger) error
	// Logger receives the fleet's and the relays' logs.
	Logger *slog.Logger
}

// sharedPoolSize is the pool of a database that serves several outboxes
// or a pattern: relay.PoolSize lets one busy outbox work at full speed,
// and the rest is left to the others, whose idle queries are short. Each
// outbox holds at most its fair share of it at once (share.go), so that
// outboxes whose statements wait on locks leave connections to the others.
const sharedPoolSize = 2 * relay.PoolSize

// errDraining is Ready's answer once the fleet is stopping.
var errDraining = errors.New("draining: shutting down")

// retryMax is the longest pause before an outbox that failed is tried again.
const retryMax = 30 * time.Second

// Fleet runs the relays of every configured outbox. Create it with New.
type Fleet struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	outboxes map[outboxKey]*outboxRun
	// searching holds the databases with a pattern whose first search
	// has not yet succeeded: until then the fleet is not ready.
	searching map[string]bool
	// failed, with FailFast, is the error that ends Run.
	failed chan error
	// draining is set once Run stops its outboxes: the fleet is not ready.
	draining atomic.Bool
	// shares bound each outbox's share of its database's pool, for the
	// databases whose pool several outboxes share, by URL.
	shares map[string]*shares
}

// outboxKey names an outbox: its database and schema.
type outboxKey struct{ url, schema string }

// outboxRun is one outbox's relay and its state.
type outboxRun struct {
	tenant, schema string
	stop           context.CancelFunc
	done           chan struct{}

	mu sync.Mutex
	// relay is the running relay, or nil; problem says why none runs.
	relay   *relay.Relay
	problem error
	// leaving is set once the outbox is being stopped (its schema gone):
	// it no longer counts for readiness.
	leaving bool
}

// New returns a fleet over cfg's databases; Run starts it.
func New(cfg Config) *Fleet {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	f := &Fleet{cfg: cfg, log: cfg.Logger, outboxes: map[outboxKey]*outboxRun{}, searching: map[string]bool{},
		failed: make(chan error, 1), shares: map[string]*shares{}}
	// Until its database answers, an outbox says so on /readyz.
	waiting := errors.New("starting: waiting for the database")
	for _, d := range cfg.Databases {
		for _, s := range d.Schemas {
			f.track(d.URL, d.Tenant, s, waiting)
		}
		if d.Match != "" {
			f.searching[d.URL] = true
		}
	}
	return f
}

// searched records that a database's first search for its patterns
// succeeded.
func (f *Fleet) searched(url string) {
	f.mu.Lock()
	delete(f.searching, url)
	f.mu.Unlock()
}

// Run serves every outbox until ctx ends, then stops them all (each relay
// drains) and returns nil; with FailFast it returns the first outbox's
// failure, once every relay has drained.
func (f *Fleet) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	byURL := map[string][]Database{}
	var urls []string
	for _, d := range f.cfg.Databases {
		if _, ok := byURL[d.URL]; !ok {
			urls = append(urls, d.URL)
		}
		byURL[d.URL] = append(byURL[d.URL], d)
	}
	var dbs sync.WaitGroup
	for _, u := range urls {
		dbs.Go(func() { f.runDatabase(ctx, u, byURL[u]) })
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-f.failed:
		cancel()
	}
	f.draining.Store(true)
	dbs.Wait()
	return err
}

// runDatabase opens the pool that the outboxes of url share, waits for the
// database, starts the listed outboxes and searches for the matching ones
// until ctx ends; then it stops every outbox and waits for them.
func (f *Fleet) runDatabase(ctx context.Context, url string, entries []Database) {
	log := f.log
	if names := tenantNames(entries); names != "" {
		log = log.With("tenant", names)
	}
	listed, matching := 0, false
	for _, d := range entries {
		listed += len(d.Schemas)
		matching = matching || d.Match != ""
	}
	size := int32(relay.PoolSize)
	var tracer pgx.QueryTracer
	if listed > 1 || matching {
		size = sharedPoolSize
		sh := newShares(sharedPoolSize)
		f.mu.Lock()
		f.shares[url] = sh
		f.mu.Unlock()
		tracer = sh
	}
	pool, err := f.cfg.OpenPool(ctx, url, size, tracer)
	if err != nil {
		// Checked before Run: a pool that cannot be opened is a
		// configuration error.
		f.fail(fmt.Errorf("tenant %s: %w", cmp.Or(tenantNames(entries), "(unnamed)"), err), log)
		return
	}
	defer pool.Close()
	// Before the pool closes: the relays drain (ctx ended) and settle.
	defer f.stopAll(url)
	if err := f.cfg.WaitDatabase(ctx, pool, log); err != nil {
		return // ctx ended
	}
	var listener *relay.Listener
	if f.cfg.Relay.Notify {
		listener = relay.NewListener(pool, log)
		var listening sync.WaitGroup
		listenCtx, stopListening := context.WithCancel(ctx)
		listening.Go(func() { listener.Run(listenCtx) })
		// After every relay has stopped (stopAll, deferred above).
		defer listening.Wait()
		defer stopListening()
	}
	for _, d := range entries {
		for _, s := range d.Schemas {
			f.start(ctx, pool, listener, url, d, s)
		}
	}
	if !matching {
		<-ctx.Done()
		return
	}
	d := &discovery{f: f, pool: pool, listener: listener, url: url, entries: entries, log: log}
	d.loop(ctx)
}

// tenantNames joins the tenants' names (empty when none is named).
func tenantNames(entries []Database) string {
	var names []string
	for _, d := range entries {
		if d.Tenant != "" && !slices.Contains(names, d.Tenant) {
			names = append(names, d.Tenant)
		}
	}
	return strings.Join(names, ",")
}

// track records an outbox that does not run yet, and why.
func (f *Fleet) track(url, tenant, schema string, problem error) *outboxRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := outboxKey{url, schema}
	if ob := f.outboxes[key]; ob != nil {
		return ob
	}
	ob := &outboxRun{tenant: tenant, schema: schema, problem: problem}
	f.outboxes[key] = ob
	return ob
}

// start runs the outbox d.Tenant, schema in the background, unless it runs.
func (f *Fleet) start(ctx context.Context, pool *pgxpool.Pool, listener *relay.Listener, url string, d Database, schema string) {
	ob := f.track(url, d.Tenant, schema, errors.New("starting"))
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.done != nil {
		return
	}
	f.mu.Lock()
	sh := f.shares[url]
	f.mu.Unlock()
	leave := func() {}
	if sh != nil {
		ctx, leave = sh.join(ctx)
	}
	obCtx, stop := context.WithCancel(ctx)
	ob.stop, ob.done = stop, make(chan struct{})
	go func() {
		defer close(ob.done)
		defer leave()
		f.runOutbox(obCtx, pool, listener, d, ob)
	}()
}

// stop stops the outbox url, schema, waits for its relay to drain and its
// metrics to be removed, and forgets it.
func (f *Fleet) stop(url, schema string) {
	key := outboxKey{url, schema}
	f.mu.Lock()
	ob := f.outboxes[key]
	f.mu.Unlock()
	if ob == nil {
		return
	}
	ob.mu.Lock()
	stop, done := ob.stop, ob.done
	ob.leaving = true
	ob.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	f.mu.Lock()
	if f.outboxes[key] == ob {
		delete(f.outboxes, key)
	}
	f.mu.Unlock()
}

// stopAll stops every outbox of url.
func (f *Fleet) stopAll(url string) {
	f.mu.Lock()
	var schemas []string
	for k := range f.outboxes {
		if k.url == url {
			schemas = append(schemas, k.schema)
		}
	}
	f.mu.Unlock()
	var stopping sync.WaitGroup
	for _, s := range schemas {
		stopping.Go(func() { f.stop(url, s) })
	}
	stopping.Wait()
}

// fail ends Run with err when FailFast is set; otherwise it only logs.
func (f *Fleet) fail(err error, log *slog.Logger) {
	if !f.cfg.FailFast {
		log.Error("cannot serve the database's outboxes", "err", err)
		return
	}
	select {
	case f.failed <- err:
	default:
	}
}

// runOutbox prepares the outbox and runs its relay until ctx ends, trying
// again after a growing pause when either fails (or, with FailFast, ending
// the fleet).
func (f *Fleet) runOutbox(ctx context.Context, pool *pgxpool.Pool, listener *relay.Listener, d Database, ob *outboxRun) {
	log := f.log
	if ob.tenant != "" {
		log = log.With("tenant", ob.tenant)
	}
	metrics := relay.NewMetrics()
	reg := f.cfg.Registerer
	if f.cfg.Labelled {
		labels := prometheus.Labels{"schema": ob.schema}
		if ob.tenant != "" {
			labels["tenant"] = ob.tenant
		}
		reg = prometheus.WrapRegistererWith(labels, reg)
	}
	if reg != nil {
		if err := metrics.Register(reg); err != nil {
			f.fail(fmt.Errorf("register the metrics of schema %s: %w", ob.schema, err), log)
			return
		}
		defer metrics.Unregister(reg)
	}
	wait := time.Second
	for {
		err := f.cfg.Prepare(ctx, pool, ob.schema, log.With("schema", ob.schema))
		if err == nil {
			rc := f.cfg.Relay
			rc.Schema, rc.Mode = ob.schema, cmp.Or(d.Mode, rc.Mode)
			rc.Metrics, rc.Listener, rc.Logger = metrics, listener, log
			r, newErr := relay.New(pool, rc)
			if newErr != nil {
				ob.set(nil, newErr)
				f.fail(fmt.Errorf("schema %s: %w", ob.schema, newErr), log)
				return
			}
			ob.set(r, nil)
			err = r.Run(ctx) // nil once ctx ended and the relay drained
		}
		switch {
		case ctx.Err() != nil:
			ob.set(nil, errors.New("stopped"))
			return
		case f.cfg.FailFast:
			ob.set(nil, err)
			f.fail(err, log)
			return
		}
		ob.set(nil, fmt.Errorf("failed, tried again in %s: %w", wait, err))
		log.Error("outbox stopped: it is tried again on its own, the other outboxes go on", "schema", ob.schema, "err", err, "retry_in", wait)
		sleepCtx(ctx, wait)
		wait = min(2*wait, retryMax)
	}
}

// set records the outbox's running relay, or why none runs.
func (ob *outboxRun) set(r *relay.Relay, problem error) {
	ob.mu.Lock()
	ob.relay, ob.problem = r, problem
	ob.mu.Unlock()
}

// ready reports whether the outbox can do its work.
func (ob *outboxRun) ready(ctx context.Context) error {
	ob.mu.Lock()
	r, problem := ob.relay, ob.problem
	ob.mu.Unlock()
	if r == nil {
		return cmp.Or(problem, errors.New("not running"))
	}
	return r.Ready(ctx)
}

// name is how /readyz and the logs name the outbox.
func (ob *outboxRun) name() string {
	if ob.tenant != "" {
		return "tenant " + ob.tenant + " schema " + ob.schema
	}
	return "schema " + ob.schema
}

// Ready reports whether the fleet can do its work: every outbox is ready,
// or with ReadyWhenAny at least one (or none is served). Its error names
// the outboxes that are not, and why; with one outbox it is that
// outbox's relay's error as it is.
func (f *Fleet) Ready(ctx context.Context) error {
	if f.draining.Load() {
		return errDraining
	}
	f.mu.Lock()
	obs := make([]*outboxRun, 0, len(f.outboxes))
	for _, ob := range f.outboxes {
		ob.mu.Lock()
		leaving := ob.leaving
		ob.mu.Unlock()
		if !leaving {
			obs = append(obs, ob)
		}
	}
	searching := len(f.searching)
	f.mu.Unlock()
	slices.SortFunc(obs, func(a, b *outboxRun) int { return cmp.Compare(a.name(), b.name()) })
	if len(obs) == 1 && searching == 0 && !f.cfg.Labelled {
		return obs[0].ready(ctx)
	}
	var problems []string
	if searching > 0 {
		// Counted as one outbox each: the fleet does not know yet what
		// they hold.
		problems = append(problems, fmt.Sprintf("starting: %d database(s) not yet searched for the schemas to serve", searching))
	}
	for _, ob := range obs {
		if err := ob.ready(ctx); err != nil {
			problems = append(problems, ob.name()+": "+err.Error())
		}
	}
	total := len(obs) + searching
	if len(problems) == 0 || f.cfg.ReadyWhenAny && len(problems) < total {
		return nil
	}
	return fmt.Errorf("%d of %d outboxes cannot work: %s", len(problems), total, strings.Join(problems, "; "))
}

// Live reports whether every outbox's relay still turns (relay.Relay.Live):
// its error names each outbox whose relay is stuck, and why. An outbox
// whose relay does not run (waiting for its database, tried again after a
// failure) is live: it recovers by itself. A relay draining at shutdown is
// checked until it has stopped.
func (f *Fleet) Live() error {
	f.mu.Lock()
	obs := make([]*outboxRun, 0, len(f.outboxes))
	for _, ob := range f.outboxes {
		obs = append(obs, ob)
	}
	f.mu.Unlock()
	slices.SortFunc(obs, func(a, b *outboxRun) int { return cmp.Compare(a.name(), b.name()) })
	var problems []string
	for _, ob := range obs {
		ob.mu.Lock()
		r := ob.relay
		ob.mu.Unlock()
		if r == nil {
			continue
		}
		if err := r.Live(); err != nil {
			problems = append(problems, ob.name()+": "+err.Error())
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d outboxes are stuck: %s", len(problems), len(obs), strings.Join(problems, "; "))
}

// Served returns the outboxes served now, as tenant/schema (schema alone
// when the tenant is unnamed), sorted.
func (f *Fleet) Served() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, ob := range f.outboxes {
		out = append(out, strings.TrimPrefix(ob.tenant+"/"+ob.schema, "/"))
	}
	slices.Sort(out)
	return out
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
