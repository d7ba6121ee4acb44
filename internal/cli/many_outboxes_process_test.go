package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// One relay process, many outboxes (RELAY_SCHEMAS, RELAY_SCHEMA_MATCH,
// RELAY_TENANTS_FILE): what a user checks on the binary. Every message
// arrives byte for byte, once (or deduplicated by its idempotency key),
// each hot table empties, an outbox that fails (its schema dropped, its
// database stopped) leaves the others delivering, and /metrics and /readyz
// say which outbox is which.

// siblingSchema is schema base.Name_suffix on base's database, migrated
// when migrate is set, dropped at cleanup. base is a reserved name
// (dbtest.NewEmpty), so that the siblings of one test share a prefix that
// no other test's schema has, for RELAY_SCHEMA_MATCH.
func siblingSchema(t *testing.T, base *dbtest.Schema, suffix string, migrate bool) *dbtest.Schema {
	t.Helper()
	s := &dbtest.Schema{Name: base.Name + "_" + suffix, Pool: base.Pool, URL: base.URL}
	t.Cleanup(func() { // before base's pool closes: cleanups run last first
		_, _ = base.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE")
	})
	if migrate {
		migrateWithLibrary(t, s)
	}
	return s
}

// migrateWithLibrary applies the migrations to s with migrations.Apply.
func migrateWithLibrary(t *testing.T, s *dbtest.Schema) {
	t.Helper()
	conn, err := s.Pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := migrations.Apply(context.Background(), conn.Conn(), s.Name); err != nil {
		t.Fatalf("migrate schema %s: %v", s.Name, err)
	}
}

// dropSchema drops s with everything in it, as an operator retiring an
// outbox would.
func dropSchema(t *testing.T, s *dbtest.Schema) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE"); err != nil {
		t.Fatalf("drop schema %s: %v", s.Name, err)
	}
}

// likeEscape quotes s for a LIKE pattern (\ is the escape).
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`).Replace(s)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// insertNumbered inserts rows from..to-1 into db, one statement, each with
// a payload of its own (non-UTF-8 bytes included) and two headers.
func insertNumbered(t testing.TB, db *dbtest.Schema, topic string, from, to int) error {
	return insertNumberedDue(t, db, topic, from, to, 0)
}

// insertNumberedDue is insertNumbered for rows due after delay
// (available_at), which no relay may claim before.
func insertNumberedDue(t testing.TB, db *dbtest.Schema, topic string, from, to int, delay time.Duration) error {
	_, err := db.Pool.Exec(context.Background(), `
INSERT INTO `+db.Table("messages")+` (topic, payload, headers, available_at)
SELECT $1, '\x00fe'::bytea || convert_to($1 || ' ' || i, 'UTF8'),
       jsonb_build_object('content-type', 'text/plain', 'seq', i::text),
       now() + make_interval(secs => $4)
  FROM generate_series($2::int, $3::int - 1) AS i`, topic, from, to, delay.Seconds())
	return err
}

// writer inserts a row into db every few milliseconds until stopped, and
// counts what it inserted: the traffic that goes on while something else
// happens to another outbox.
type writer struct {
	stop     chan struct{}
	done     chan struct{}
	inserted atomic.Int64
	errs     []error
}

// startWriter inserts rows of topic into db every 10ms until w.halt.
func startWriter(t *testing.T, db *dbtest.Schema, topic string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if err := insertNumbered(t, db, topic, i, i+1); err != nil {
				w.errs = append(w.errs, err)
				return
			}
			w.inserted.Add(1)
		}
	}()
	t.Cleanup(func() { w.halt(t) })
	return w
}

// halt stops the writer and returns how many rows it inserted; it fails t
// when an insert failed.
func (w *writer) halt(t *testing.T) int {
	t.Helper()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	for _, err := range w.errs {
		t.Errorf("writer: %v", err)
	}
	w.errs = nil
	return int(w.inserted.Load())
}

// seriesSum sums the samples of metric name whose labels include every one
// of labels, from the exposition text; found says whether there was one.
func seriesSum(text, name string, labels map[string]string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		have := parseLabels(strings.TrimPrefix(series, name))
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		sum, found = sum+f, true
	}
	return sum, found
}

// parseLabels parses {a="x",b="y"} (no escaped quotes in the values these
// tests use).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	for _, kv := range strings.Split(s, `",`) {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// deliveredMetric is outbox_relay_messages_total of the delivered rows of
// one outbox (schema, and tenant when not empty).
func deliveredMetric(p *process, schema, tenant string) float64 {
	labels := map[string]string{"outcome": "delivered", "schema": schema, "sink": "nats"}
	if tenant != "" {
		labels["tenant"] = tenant
	}
	v, _ := seriesSum(p.metrics(), "outbox_relay_messages_total", labels)
	return v
}

// waitReady waits for /readyz to answer want, returning its body.
func waitReady(t *testing.T, p *process, want int, bodyHas ...string) string {
	t.Helper()
	var body string
	waitfor.Condition(t, 60*time.Second, fmt.Sprintf("/readyz to answer %d naming %q", want, bodyHas), func() bool {
		var code int
		code, body = p.readyz()
		if code != want {
			return false
		}
		for _, s := range bodyHas {
			if !strings.Contains(body, s) {
				return false
			}
		}
		return true
	})
	return body
}

// waitLogAll waits for a log line holding every one of parts.
func waitLogAll(t *testing.T, p *process, parts ...string) {
	t.Helper()
	waitfor.Condition(t, 60*time.Second, fmt.Sprintf("a log line with %q", parts), func() bool { return logHas(p, parts...) })
}

// schemaAttr is how the JSON log names a schema.
func schemaAttr(name string) string { return `"schema":"` + name + `"` }

// TestProcess_ManyOutboxes_ThreeSchemasDeliverEachOnce: one relay serves
// three schemas listed in RELAY_SCHEMAS; each one's rows, inserted before
// and after the start, arrive once and byte for byte, each hot table
// empties, each schema's counters on /metrics count its own rows, and
// /readyz answers 200.
func TestProcess_ManyOutboxes_ThreeSchemasDeliverEachOnce(t *testing.T) {
	t.Parallel()
	base := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	want := map[string]int{"a": 300, "b": 200, "c": 100} // unlike counts: a label mixed up shows
	dbs := map[string]*dbtest.Schema{}
	var names []string
	for _, s := range []string{"a", "b", "c"} {
		dbs[s] = siblingSchema(t, base, s, true)
		names = append(names, dbs[s].Name)
		srv.CreateStream(t, "S_"+s, s+".>")
		relaytest.InsertRows(t, dbs[s], want[s]/2, s+".created")
	}
	p := startProcess(t, "DATABASE_URL="+base.URL, "RELAY_SCHEMAS="+strings.Join(names, ","), "NATS_URL="+srv.URL())
	for _, s := range []string{"a", "b", "c"} {
		if err := insertNumbered(t, dbs[s], s+".later", 0, want[s]-want[s]/2); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"a", "b", "c"} {
		relaytest.WaitDrained(t, dbs[s], relaytest.Budget(want[s]))
	}
	for _, s := range []string{"a", "b", "c"} {
		relaytest.AssertStreamMatchesArchive(t, dbs[s], srv, "S_"+s, want[s])
		waitfor.Count(t, 30*time.Second, "delivered rows of schema "+s+" on /metrics",
			func() float64 { return deliveredMetric(p, dbs[s].Name, "") }, float64(want[s]))
	}
	waitReady(t, p, 200)
	metrics := p.metrics()
	for _, s := range []string{"a", "b", "c"} {
		if _, ok := seriesSum(metrics, "outbox_relay_claim_duration_seconds_count", map[string]string{"schema": dbs[s].Name}); !ok {
			t.Errorf("/metrics has no claim_duration_seconds of schema %s", dbs[s].Name)
		}
	}
	if _, ok := seriesSum(metrics, "outbox_relay_messages_total", map[string]string{"schema": ""}); ok {
		t.Error("/metrics has relay series without a schema label while serving three schemas")
	}
}

// TestProcess_ManyOutboxes_SchemaMatchFindsNewSchemasAndLetsDroppedOnesGo:
// with RELAY_SCHEMA_MATCH and RELAY_DISCOVER_INTERVAL=1s, schemas that
// match and are migrated while the relay runs (by `outbox-relay migrate`,
// and by migrations.Apply) are served without a restart; a migrated schema
// that does not match is never served. A matched schema dropped while
// writers keep inserting into the others is logged as gone and its series
// leave /metrics, and the others' rows all arrive once.
func TestProcess_ManyOutboxes_SchemaMatchFindsNewSchemasAndLetsDroppedOnesGo(t *testing.T) {
	t.Parallel()
	base := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	for _, s := range []string{"m1", "m2", "m3", "x1"} {
		srv.CreateStream(t, "S_"+s, s+".>")
	}
	m1 := siblingSchema(t, base, "m1", true)
	x1 := siblingSchema(t, base, "x1", true) // migrated, not matching
	const n = 200
	relaytest.InsertRows(t, m1, n, "m1.created")
	relaytest.InsertRows(t, x1, n, "x1.created")
	pattern := likeEscape(base.Name+"_m") + "%"
	env := []string{"DATABASE_URL=" + base.URL, "RELAY_SCHEMA_MATCH=" + pattern, "RELAY_DISCOVER_INTERVAL=1s", "NATS_URL=" + srv.URL()}
	p := startProcess(t, env...)
	relaytest.WaitDrained(t, m1, relaytest.Budget(n))
	waitReady(t, p, 200)

	// A tenant's schema created while the relay runs, migrated with the
	// binary; another with the library.
	m2 := siblingSchema(t, base, "m2", false)
	if code, _, stderr := runBinary(t, []string{"DATABASE_URL=" + base.URL, "RELAY_SCHEMA=" + m2.Name}, "migrate"); code != 0 {
		t.Fatalf("outbox-relay migrate exited %d: %s", code, stderr)
	}
	m3 := siblingSchema(t, base, "m3", true)
	relaytest.InsertRows(t, m2, n, "m2.created")
	relaytest.InsertRows(t, m3, n, "m3.created")
	waitLogAll(t, p, `"schema found: serving its outbox"`, schemaAttr(m2.Name))
	waitLogAll(t, p, `"schema found: serving its outbox"`, schemaAttr(m3.Name))
	relaytest.WaitDrained(t, m2, relaytest.Budget(n))
	relaytest.WaitDrained(t, m3, relaytest.Budget(n))
	relaytest.AssertStreamMatchesArchive(t, m2, srv, "S_m2", n)
	waitfor.Count(t, 30*time.Second, "delivered rows of m2 on /metrics", func() float64 { return deliveredMetric(p, m2.Name, "") }, n)

	// The schema that does not match: several searches later, untouched.
	searches := len(p.logLines("INFO", `"schema found`))
	time.Sleep(3 * time.Second) // three searches at RELAY_DISCOVER_INTERVAL=1s: what is observed is that nothing happens
	if got := x1.Count(t, "messages_all"); got != n {
		t.Errorf("schema %s, which does not match %s, has %d rows left of %d: the relay served it", x1.Name, pattern, got, n)
	}
	if got := srv.Count(t, "S_x1"); got != 0 {
		t.Errorf("%d messages of the schema that does not match were published", got)
	}
	if logHas(p, schemaAttr(x1.Name)) || strings.Contains(p.metrics(), x1.Name) {
		t.Errorf("the relay names schema %s, which does not match %s", x1.Name, pattern)
	}
	if got := len(p.logLines("INFO", `"schema found`)); got != searches {
		t.Errorf("%d more 'schema found' lines without a new schema", got-searches)
	}

	// m2 dropped while writers keep inserting into m1 and m3.
	w1, w3 := startWriter(t, m1, "m1.more"), startWriter(t, m3, "m3.more")
	waitfor.Condition(t, 30*time.Second, "the writers to insert", func() bool { return w1.inserted.Load() > 20 && w3.inserted.Load() > 20 })
	dropSchema(t, m2)
	waitLogAll(t, p, `"schema gone (dropped, renamed, or no longer an outbox): its relay stops"`, schemaAttr(m2.Name))
	waitfor.Condition(t, 60*time.Second, "schema "+m2.Name+"'s series to leave /metrics", func() bool {
		return !strings.Contains(p.metrics(), `schema="`+m2.Name+`"`)
	})
	// The others go on delivering after the drop.
	after1 := m1.Count(t, "archive")
	waitfor.Condition(t, 60*time.Second, "m1 to keep delivering", func() bool { return m1.Count(t, "archive") > after1+20 })
	more1, more3 := w1.halt(t), w3.halt(t)
	relaytest.WaitDrained(t, m1, relaytest.Budget(n+more1))
	relaytest.WaitDrained(t, m3, relaytest.Budget(n+more3))
	relaytest.AssertStreamMatchesArchive(t, m1, srv, "S_m1", n+more1)
	relaytest.AssertStreamMatchesArchive(t, m3, srv, "S_m3", n+more3)
	if !p.running() {
		t.Fatal("the relay exited")
	}
	waitReady(t, p, 200)
}

// TestProcess_ManyOutboxes_ListedSchemaDroppedLeavesTheOtherDelivering:
// two relays serve RELAY_SCHEMAS=a,b, one with RELAY_READY_WHEN=all, one
// with any. b is dropped while a writer keeps inserting into a: a's rows
// all arrive once; /readyz of the first turns 503 naming schema b (and not
// a), that of the second stays 200.
func TestProcess_ManyOutboxes_ListedSchemaDroppedLeavesTheOtherDelivering(t *testing.T) {
	t.Parallel()
	base := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "S_a", "a.>")
	srv.CreateStream(t, "S_b", "b.>")
	a, b := siblingSchema(t, base, "a", true), siblingSchema(t, base, "b", true)
	env := []string{"DATABASE_URL=" + base.URL, "RELAY_SCHEMAS=" + a.Name + "," + b.Name, "NATS_URL=" + srv.URL()}
	all := startProcess(t, append(env, "RELAY_READY_WHEN=all", "RELAY_ID=all")...)
	anyOne := startProcess(t, append(env, "RELAY_READY_WHEN=any", "RELAY_ID=any")...)
	waitReady(t, all, 200)
	waitReady(t, anyOne, 200)
	// Both serve b before it is dropped: /readyz with any answers 200 once
	// a has started, and a relay still starting b would migrate the
	// dropped schema afresh, as it does any listed schema on its first
	// start.
	waitLogAll(t, all, `"relay started"`, schemaAttr(b.Name))
	waitLogAll(t, anyOne, `"relay started"`, schemaAttr(b.Name))

	const n = 100
	relaytest.InsertRows(t, b, n, "b.created")
	relaytest.WaitDrained(t, b, relaytest.Budget(n))
	relaytest.AssertStreamMatchesArchive(t, b, srv, "S_b", n)

	w := startWriter(t, a, "a.created")
	waitfor.Condition(t, 30*time.Second, "a's first deliveries", func() bool { return a.Count(t, "archive") > 20 })
	dropSchema(t, b)
	body := waitReady(t, all, 503, "schema "+b.Name)
	if strings.Contains(body, "schema "+a.Name+":") {
		t.Errorf("/readyz names schema a, which works: %s", body)
	}
	t.Logf("/readyz with RELAY_READY_WHEN=all: %s", body)
	for range 3 {
		if code, body := anyOne.readyz(); code != 200 {
			t.Errorf("/readyz with RELAY_READY_WHEN=any answered %d while schema a works: %s", code, body)
		}
		time.Sleep(time.Second) // the answer is cached for a second: three distinct answers
	}
	// a goes on delivering after b is gone.
	before := a.Count(t, "archive")
	waitfor.Condition(t, 60*time.Second, "a to keep delivering", func() bool { return a.Count(t, "archive") > before+20 })
	inserted := w.halt(t)
	relaytest.WaitDrained(t, a, relaytest.Budget(inserted))
	relaytest.AssertStreamMatchesArchive(t, a, srv, "S_a", inserted)
	if !all.running() || !anyOne.running() {
		t.Error("a relay exited when a listed schema was dropped")
	}
}

// TestProcess_ManyOutboxes_TenantsFileTwoDatabasesOneStops: a tenants file
// names two databases, tenant a on the shared server (its URL from
// ${VAR}), tenant b on a PostgreSQL server of the test's own. Both are
// served, their metrics labelled by tenant. b's server is then stopped
// (pg_ctl stop -m fast) while rows keep going into a: a's rows are all
// delivered meanwhile, /readyz (RELAY_READY_WHEN=all) answers 503 naming
// tenant b; once b's server is back, the rows inserted into b before the
// stop and after the restart are all delivered, once.
func TestProcess_ManyOutboxes_TenantsFileTwoDatabasesOneStops(t *testing.T) {
	t.Parallel()
	a := dbtest.New(t)
	priv := dbtest.StartServer(t)
	bPool, err := pgxpool.New(context.Background(), priv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bPool.Close)
	b := &dbtest.Schema{Name: "outbox", Pool: bPool, URL: priv.URL()}
	migrateWithLibrary(t, b)
	srv := natstest.Start(t)
	srv.CreateStream(t, "S_a", "a.>")
	srv.CreateStream(t, "S_b", "b.>")

	path := writeTenants(t, fmt.Sprintf(`tenants:
  - name: a
    database_url: ${TENANT_A_DATABASE_URL}
    schemas: [%s]
  - name: b
    database_url: %s
    schemas: [outbox]
`, a.Name, priv.URL()))
	p := startProcess(t, "RELAY_TENANTS_FILE="+path, "TENANT_A_DATABASE_URL="+a.URL, "NATS_URL="+srv.URL(),
		"RELAY_LEASE=5s", "NATS_ACK_TIMEOUT=2s")
	const n = 200
	relaytest.InsertRows(t, a, n, "a.created")
	relaytest.InsertRows(t, b, n, "b.created")
	relaytest.WaitDrained(t, a, relaytest.Budget(n))
	relaytest.WaitDrained(t, b, relaytest.Budget(n))
	waitfor.Count(t, 30*time.Second, "tenant a's delivered rows on /metrics", func() float64 { return deliveredMetric(p, a.Name, "a") }, n)
	waitfor.Count(t, 30*time.Second, "tenant b's delivered rows on /metrics", func() float64 { return deliveredMetric(p, "outbox", "b") }, n)
	waitReady(t, p, 200)

	// b's server stops with rows of b waiting (some due at once, some
	// due in a few seconds: those cannot have gone before the stop), while
	// a's writer goes on.
	w := startWriter(t, a, "a.more")
	if err := insertNumbered(t, b, "b.before-stop", 0, 250); err != nil {
		t.Fatal(err)
	}
	if err := insertNumberedDue(t, b, "b.before-stop", 250, 500, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	priv.Stop()
	body := waitReady(t, p, 503, "tenant b schema outbox")
	if strings.Contains(body, "tenant a") {
		t.Errorf("/readyz names tenant a, which works: %s", body)
	}
	if strings.Contains(body, "postgres://") {
		t.Errorf("/readyz shows a database URL: %s", body)
	}
	t.Logf("/readyz while b's server is down: %s", body)
	before := a.Count(t, "archive")
	waitfor.Condition(t, 60*time.Second, "tenant a to keep delivering while b's server is down", func() bool {
		return a.Count(t, "archive") > before+50
	})
	if code, _ := p.readyz(); code != 503 {
		t.Fatalf("/readyz answered %d while b's server was still down", code)
	}

	priv.Start()
	bPool.Reset() // its connections died with the server
	left := b.Count(t, "messages_all")
	t.Logf("%d rows of b inserted before the stop were left when its server came back", left)
	if left == 0 {
		t.Fatal("no row of b was left when its server came back: the stop took longer than the rows' delay, the test proves nothing")
	}
	if err := insertNumbered(t, b, "b.after-restart", 0, 300); err != nil {
		t.Fatal(err)
	}
	more := w.halt(t)
	relaytest.WaitDrained(t, a, relaytest.Budget(n+more))
	relaytest.WaitDrained(t, b, relaytest.Budget(800))
	relaytest.AssertStreamMatchesArchive(t, a, srv, "S_a", n+more)
	relaytest.AssertStreamMatchesArchive(t, b, srv, "S_b", n+800)
	waitReady(t, p, 200)
	if !p.running() {
		t.Error("the relay exited")
	}
}

// TestProcess_ManyOutboxes_TrickleIsNotQueuedBehindAHotBacklog: schema hot
// holds 50,000 rows when the relay starts; schema cold gets a row every
// 50ms meanwhile. Every cold row is delivered before hot's backlog is
// (cold's last delivery precedes hot's), and every row of both arrives
// once.
func TestProcess_ManyOutboxes_TrickleIsNotQueuedBehindAHotBacklog(t *testing.T) {
	t.Parallel()
	dbtest.Exclusive(t, "many relays, many events")
	base := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "S_hot", "hot.>")
	srv.CreateStream(t, "S_cold", "cold.>")
	hot, cold := siblingSchema(t, base, "hot", true), siblingSchema(t, base, "cold", true)
	const backlog = 50000
	relaytest.InsertRows(t, hot, backlog, "hot.created")
	startProcess(t, "DATABASE_URL="+base.URL, "RELAY_SCHEMAS="+hot.Name+","+cold.Name, "NATS_URL="+srv.URL())
	waitfor.Condition(t, 60*time.Second, "hot's first deliveries", func() bool { return hot.Count(t, "archive") > 0 })

	// The trickle stops early when hot's backlog runs low, so that each
	// cold row is inserted while hot has thousands of rows left.
	var low atomic.Bool
	watching := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			var left int
			if err := base.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+hot.Table("messages")).Scan(&left); err == nil && left <= 10000 {
				low.Store(true)
			}
			select {
			case <-watching:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	trickled := 0
	pace := time.NewTicker(50 * time.Millisecond) // the trickle's pace, not a measurement
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end) && !low.Load(); trickled++ {
		if err := insertNumbered(t, cold, "cold.created", trickled, trickled+1); err != nil {
			t.Fatal(err)
		}
		<-pace.C
	}
	pace.Stop()
	close(watching)
	<-watched
	if trickled < 5 {
		t.Fatalf("only %d cold rows went in while hot had a backlog: the test proves nothing", trickled)
	}
	relaytest.WaitDrained(t, cold, relaytest.Budget(trickled))
	leftInHot := hot.Count(t, "messages_all")
	t.Logf("%d cold rows trickled in; when the last was delivered, hot had %d rows left", trickled, leftInHot)
	relaytest.WaitDrained(t, hot, relaytest.Budget(backlog))
	var coldLast, hotLast time.Time
	if err := base.Pool.QueryRow(context.Background(), "SELECT (SELECT max(delivered_at) FROM "+cold.Table("archive")+"), (SELECT max(delivered_at) FROM "+hot.Table("archive")+")").Scan(&coldLast, &hotLast); err != nil {
		t.Fatal(err)
	}
	if leftInHot == 0 && !coldLast.Before(hotLast) {
		t.Errorf("cold's last row was delivered at %s, hot's backlog was done at %s: the trickle waited behind the backlog", coldLast, hotLast)
	}
	relaytest.AssertStreamMatchesArchive(t, cold, srv, "S_cold", trickled)
	relaytest.AssertStreamMatchesArchive(t, hot, srv, "S_hot", backlog)
}

// listeningBackends returns the pids of the backends named app in
// pg_stat_activity whose last statement was a LISTEN or an UNLISTEN: the
// relay's listening connections, which do nothing else.
func listeningBackends(t *testing.T, pool *pgxpool.Pool, app string) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT pid FROM pg_catalog.pg_stat_activity
 WHERE application_name = $1 AND (query ILIKE 'LISTEN %' OR query ILIKE 'UNLISTEN %')
 ORDER BY pid`, app)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestProcess_ManyOutboxes_NotifyListensOnOneConnectionForThreeSchemas:
// with RELAY_NOTIFY=true and three schemas, the relay holds one listening
// connection to the database, not one per schema; with
// RELAY_POLL_INTERVAL=1m a row inserted into each schema after the
// listening log lines is delivered long before a poll could have found it.
func TestProcess_ManyOutboxes_NotifyListensOnOneConnectionForThreeSchemas(t *testing.T) {
	t.Parallel()
	base := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	app := "outbox-relay-notify-" + randomHex(4)
	var dbs []*dbtest.Schema
	var names []string
	for _, s := range []string{"a", "b", "c"} {
		db := siblingSchema(t, base, s, true)
		dbs, names = append(dbs, db), append(names, db.Name)
		srv.CreateStream(t, "S_"+s, s+".>")
	}
	p := startProcess(t, "DATABASE_URL="+withApplicationName(t, base.URL, app), "RELAY_SCHEMAS="+strings.Join(names, ","),
		"NATS_URL="+srv.URL(), "RELAY_NOTIFY=true", "RELAY_POLL_INTERVAL=1m")
	for _, db := range dbs {
		waitLogAll(t, p, `"RELAY_NOTIFY: listening for inserts"`, schemaAttr(db.Name))
	}
	listening := time.Now()
	if pids := listeningBackends(t, base.Pool, app); len(pids) != 1 {
		t.Errorf("%d listening connections from the relay (%v), want 1 for three schemas of one database", len(pids), pids)
	}
	for i, db := range dbs {
		relaytest.InsertRows(t, db, 1, []string{"a", "b", "c"}[i]+".created")
	}
	for _, db := range dbs {
		relaytest.WaitDrained(t, db, 40*time.Second)
	}
	// The claims before the listening lines were the last polls: the next
	// is a minute (less 20% jitter) after them.
	if took := time.Since(listening); took > 45*time.Second {
		t.Fatalf("the rows took %s to arrive: a poll may have found them, the test proves nothing", took)
	}
	for i, db := range dbs {
		relaytest.AssertStreamMatchesArchive(t, db, srv, "S_"+[]string{"a", "b", "c"}[i], 1)
	}
	if pids := listeningBackends(t, base.Pool, app); len(pids) != 1 {
		t.Errorf("after the deliveries, %d listening connections from the relay (%v), want 1", len(pids), pids)
	}
}

// claimCounts returns outbox_relay_claim_duration_seconds_count by schema.
func claimCounts(p *process, schemas ...string) map[string]float64 {
	text := p.metrics()
	out := map[string]float64{}
	for _, s := range schemas {
		out[s], _ = seriesSum(text, "outbox_relay_claim_duration_seconds_count", map[string]string{"schema": s})
	}
	return out
}

// TestProcess_ManyOutboxes_IdlePollIntervalBacksOffIdleClaims: two idle
// schemas with RELAY_POLL_INTERVAL=20ms and RELAY_IDLE_POLL_INTERVAL=2s
// claim a handful of times in six seconds, not the ~300 times a 20ms poll
// would; a row inserted then still arrives, within the idle interval and
// generous slack.
func TestProcess_ManyOutboxes_IdlePollIntervalBacksOffIdleClaims(t *testing.T) {
	t.Parallel()
	base := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "S_a", "a.>")
	srv.CreateStream(t, "S_b", "b.>")
	a, b := siblingSchema(t, base, "a", true), siblingSchema(t, base, "b", true)
	p := startProcess(t, "DATABASE_URL="+base.URL, "RELAY_SCHEMAS="+a.Name+","+b.Name, "NATS_URL="+srv.URL(),
		"RELAY_POLL_INTERVAL=20ms", "RELAY_IDLE_POLL_INTERVAL=2s")
	waitLogAll(t, p, `"relay started"`, schemaAttr(a.Name))
	waitLogAll(t, p, `"relay started"`, schemaAttr(b.Name))
	before := claimCounts(p, a.Name, b.Name)
	began := time.Now()
	time.Sleep(6 * time.Second) // the window in which claims are counted
	after := claimCounts(p, a.Name, b.Name)
	window := time.Since(began)
	for _, s := range []string{a.Name, b.Name} {
		claims := after[s] - before[s]
		t.Logf("schema %s: %v claims in %s", s, claims, window.Round(time.Millisecond))
		if claims >= 30 {
			t.Errorf("idle schema %s claimed %v times in %s with RELAY_IDLE_POLL_INTERVAL=2s (a 20ms poll would claim ~%d times)",
				s, claims, window.Round(time.Millisecond), window/(20*time.Millisecond))
		}
		if after[s] == 0 {
			t.Errorf("no claims of schema %s on /metrics", s)
		}
	}
	inserted := time.Now()
	relaytest.InsertRows(t, a, 1, "a.created")
	relaytest.InsertRows(t, b, 1, "b.created")
	relaytest.WaitDrained(t, a, 30*time.Second)
	relaytest.WaitDrained(t, b, 30*time.Second)
	// 2s (+20% jitter) at most between two claims; the rest is slack for
	// a loaded machine.
	if took := time.Since(inserted); took > 20*time.Second {
		t.Errorf("rows inserted into idle schemas took %s to arrive with RELAY_IDLE_POLL_INTERVAL=2s", took)
	}
	relaytest.AssertStreamMatchesArchive(t, a, srv, "S_a", 1)
	relaytest.AssertStreamMatchesArchive(t, b, srv, "S_b", 1)
}

// TestProcess_ManyOutboxes_InvalidConfigurationExitsNamingTheVariable: the
// binary refuses, before connecting anywhere, the configurations of many
// outboxes that cannot work, exiting non-zero with an error that names the
// variable and never shows a database URL's password.
func TestProcess_ManyOutboxes_InvalidConfigurationExitsNamingTheVariable(t *testing.T) {
	t.Parallel()
	const password = "s3cret-Pa55word"
	dbURL := "postgres://relay:" + password + "@127.0.0.1:1/app?sslmode=disable"
	tenant := func(name string) string {
		return fmt.Sprintf("  - name: %s\n    database_url: %s\n    schemas: [outbox]\n", name, dbURL)
	}
	cases := []struct {
		name string
		env  []string
		file string // the tenants file's content, when set
		want []string
	}{
		{name: "SchemaAndSchemas", env: []string{"DATABASE_URL=" + dbURL, "RELAY_SCHEMA=outbox", "RELAY_SCHEMAS=a,b"},
			want: []string{"RELAY_SCHEMAS", "RELAY_SCHEMA"}},
		{name: "TenantsFileAndDatabaseURL", env: []string{"DATABASE_URL=" + dbURL}, file: "tenants:\n" + tenant("a"),
			want: []string{"RELAY_TENANTS_FILE", "DATABASE_URL"}},
		{name: "TenantsFileUnknownKey", file: "tenants:\n" + tenant("a") + "    shema_match: x%\n",
			want: []string{"RELAY_TENANTS_FILE", "shema_match"}},
		{name: "TenantsFileUnsetVariable", file: "tenants:\n  - name: a\n    database_url: postgres://relay:" + password + "@${UNSET_HOST_VAR}/app\n    schemas: [outbox]\n",
			want: []string{"RELAY_TENANTS_FILE", "UNSET_HOST_VAR"}},
		{name: "TenantsFileDuplicateName", file: "tenants:\n" + tenant("a") + tenant("a"),
			want: []string{"RELAY_TENANTS_FILE", `tenant "a" is listed twice`}},
		{name: "TenantsFileURLUnderAListKey", file: "tenants:\n  - name: a\n    schemas: " + dbURL + "\n",
			want: []string{"RELAY_TENANTS_FILE", "line 3"}},
		{name: "InvalidSchemaInSchemas", env: []string{"DATABASE_URL=" + dbURL, "RELAY_SCHEMAS=orders,Bad-Schema"},
			want: []string{"RELAY_SCHEMAS", "Bad-Schema"}},
		{name: "SchemaMatchEverything", env: []string{"DATABASE_URL=" + dbURL, "RELAY_SCHEMA_MATCH=%"},
			want: []string{"RELAY_SCHEMA_MATCH", "matches every schema"}},
		{name: "SchemaMatchOnlyWildcards", env: []string{"DATABASE_URL=" + dbURL, "RELAY_SCHEMA_MATCH=_%%_"},
			want: []string{"RELAY_SCHEMA_MATCH", "matches every schema"}},
		{name: "TenantsFileSchemaMatchEverything", file: "tenants:\n" + tenant("a") + "    schema_match: '%'\n",
			want: []string{"RELAY_TENANTS_FILE", `tenant "a"`, "schema_match", "matches every schema"}},
		{name: "SchemaOwnersWithoutSchemaMatch", env: []string{"DATABASE_URL=" + dbURL, "RELAY_SCHEMAS=a,b", "RELAY_SCHEMA_OWNERS=app_owner"},
			want: []string{"RELAY_SCHEMA_OWNERS", "RELAY_SCHEMA_MATCH"}},
		{name: "TenantsFileAndSchemaOwners", env: []string{"RELAY_SCHEMA_OWNERS=app_owner"}, file: "tenants:\n" + tenant("a"),
			want: []string{"RELAY_TENANTS_FILE", "RELAY_SCHEMA_OWNERS"}},
		{name: "TenantsFileSchemaOwnersUnsetVariable", file: "tenants:\n" + tenant("a") + "    schema_match: a\\_%\n    schema_owners:\n      - ${UNSET_OWNER_VAR}\n",
			want: []string{"RELAY_TENANTS_FILE", "schema_owners", "UNSET_OWNER_VAR"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := append([]string{"NATS_URL=nats://127.0.0.1:1"}, c.env...)
			if c.file != "" {
				env = append(env, "RELAY_TENANTS_FILE="+writeTenants(t, c.file))
			}
			code, stdout, stderr, took := runBinaryWithin(t, time.Minute, env, "run")
			if code == 0 || code == -1 {
				t.Fatalf("exit code %d after %s, want a refusal; stderr:\n%s", code, took, stderr)
			}
			t.Logf("exit code %d: %s", code, stderr)
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("the error does not name %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stdout+stderr, password) {
				t.Errorf("the output shows the database password:\n%s%s", stdout, stderr)
			}
			if strings.Contains(stderr, `"relay started"`) {
				t.Errorf("a relay started:\n%s", stderr)
			}
		})
	}
}
