package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// The relay's claim statements in every mode (their golden files) and
// refloop's are claims; nothing else the relay runs is.
func TestIsClaimStatement(t *testing.T) {
	files, err := filepath.Glob("../../../relay/testdata/*/*.sql")
	if err != nil || len(files) < 10 {
		t.Fatalf("golden statements: %v, %d files", err, len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.HasPrefix(filepath.Base(f), "claim")
		if got := isClaimStatement(string(data)); got != want {
			t.Errorf("%s: isClaimStatement = %v, want %v", f, got, want)
		}
	}
	for q, want := range map[string]bool{
		// refloop's claim, as pg_stat_statements records it.
		"\nUPDATE outbox o\n   SET lease_owner = $1, lease_until = now() + $2::interval, attempts = o.attempts + 1\n WHERE o.id IN (SELECT id FROM outbox\n                 WHERE lease_until IS NULL\n                 ORDER BY created_at, id\n                 LIMIT $3\n                 FOR UPDATE SKIP LOCKED)\nRETURNING o.id": true,
		"/* claim */ with   due as materialized (select 1)":                    true,
		"-- leading comment\nWITH due AS MATERIALIZED (SELECT 1)":              true,
		"SELECT 1 FOR UPDATE\n  skip\tlocked":                                  true,
		"INSERT INTO outbox.messages (topic, payload) VALUES ($1, $2)":         false,
		"WITH archived AS (DELETE FROM outbox.messages RETURNING id) SELECT 1": false,
		"SELECT * FROM pg_stat_statements":                                     false,
	} {
		if got := isClaimStatement(q); got != want {
			t.Errorf("isClaimStatement(%q) = %v, want %v", q, got, want)
		}
	}
}

func TestParseClaimHistogram(t *testing.T) {
	text := `# HELP outbox_relay_claim_duration_seconds Claim time.
# TYPE outbox_relay_claim_duration_seconds histogram
outbox_relay_claim_duration_seconds_bucket{schema="a",le="0.001"} 90
outbox_relay_claim_duration_seconds_bucket{schema="a",le="0.01"} 99
outbox_relay_claim_duration_seconds_bucket{schema="a",le="+Inf"} 100
outbox_relay_claim_duration_seconds_sum{schema="a"} 0.2
outbox_relay_claim_duration_seconds_count{schema="a"} 100
outbox_relay_claim_duration_seconds_bucket{schema="b",le="0.001"} 0
outbox_relay_claim_duration_seconds_bucket{schema="b",le="0.01"} 0
outbox_relay_claim_duration_seconds_bucket{schema="b",le="+Inf"} 0
outbox_relay_settle_duration_seconds_bucket{le="+Inf"} 7
`
	h, err := parseClaimHistogram(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if h.count != 100 || h.buckets[0.01] != 99 {
		t.Fatalf("parsed %+v", h)
	}
	if q := h.quantile(0.99); math.Abs(q-0.01) > 1e-9 {
		t.Errorf("p99 = %v, want 0.01", q)
	}
	if q := (histogram{count: 10, buckets: map[float64]float64{0.001: 5, 5: 8, math.Inf(1): 10}}).quantile(0.99); !math.IsInf(q, 1) {
		t.Errorf("p99 past the last finite bucket = %v, want +Inf", q)
	}
	d := h.minus(histogram{count: 90, buckets: map[float64]float64{0.001: 90, 0.01: 90}})
	if q := d.quantile(0.5); q <= 0.001 || q > 0.01 {
		t.Errorf("p50 of the last ten = %v, want within (0.001, 0.01]", q)
	}
}

// -pin-how takes snapshot (also when unset), xid or readers, and an error
// names the flag and the ways.
func TestPinOptionsValidate_PinHow(t *testing.T) {
	o := pinOptions{Binary: os.Args[0], Duration: 6 * time.Second, Every: 2 * time.Second, PinAfter: 2 * time.Second,
		Rate: 50, Producers: 2, PayloadBytes: 256}
	for _, how := range []string{"", pinHowSnapshot, pinHowXID, pinHowReaders} {
		o.PinHow = how
		if err := o.validate(); err != nil {
			t.Errorf("-pin-how %q: %v", how, err)
		}
	}
	for _, how := range []string{"xmin", "Snapshot", "readers,xid", " xid"} {
		o.PinHow = how
		err := o.validate()
		if err == nil {
			t.Errorf("-pin-how %q: no error", how)
			continue
		}
		for _, want := range []string{"-pin-how", "snapshot", "xid", "readers"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("-pin-how %q: error %q does not name %q", how, err, want)
			}
		}
	}
}

// A sample's line and its JSON carry the disk of the contender's tables
// and the archive's dead tuples.
func TestPinSample_DiskAndArchiveDead(t *testing.T) {
	s := pinSample{AfterS: 60, PinHeld: true, DeadTuples: 12000, RowsInTable: 40, Produced: 60000, Delivered: 59000,
		Claims: 1200, ClaimMeanMs: 0.4, BuffersPerClaim: 9, ArchiveDeadTuples: 1234,
		TablesDiskBytes: 129_394_278} // 123.4 MiB
	line := strings.Join(strings.Fields(s.line()), " ")
	if want := "buffers/claim 9 disk 123.4 MB archive dead 1234"; !strings.Contains(line, want) {
		t.Errorf("line %q lacks %q", line, want)
	}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	if fields["tables_disk_bytes"] != float64(s.TablesDiskBytes) || fields["archive_dead_tuples"] != float64(1234) {
		t.Errorf("JSON sample %s: want tables_disk_bytes %d and archive_dead_tuples 1234", data, s.TablesDiskBytes)
	}
	var back pinSample
	if err := json.Unmarshal(data, &back); err != nil || back.TablesDiskBytes != s.TablesDiskBytes || back.ArchiveDeadTuples != 1234 {
		t.Errorf("JSON sample does not read back: %v, %+v", err, back)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 bytes", 1023: "1023 bytes", 8192: "8.0 kB", 129_394_278: "123.4 MB",
		3 << 30: "3.0 GB", 1536 << 30: "1.5 TB",
	} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
}

// The summary gives the pinned / unpinned ratio of the tables' disk at
// the last sample, and a dash when the unpinned one has none.
func TestSummaryLine_Disk(t *testing.T) {
	sample := func(disk int64) []pinSample {
		return []pinSample{{AfterS: 60, PinHeld: true, Claims: 10, ClaimMeanMs: 1, TablesDiskBytes: disk}}
	}
	un, pn := &contender{Samples: sample(100 << 20)}, &contender{Samples: sample(150 << 20)}
	if got, want := summaryLine(un, pn, nil, "held snapshot"), "tables' disk at the end 1.50×"; !strings.Contains(got, want) {
		t.Errorf("summary %q lacks %q", got, want)
	}
	un.Samples[0].TablesDiskBytes = 0
	if got, want := summaryLine(un, pn, nil, "held snapshot"), "tables' disk at the end —"; !strings.Contains(got, want) {
		t.Errorf("summary %q lacks %q", got, want)
	}
}

// flushStats has conn's statistics flushed once it is idle
// (pg_stat_force_next_flush, PostgreSQL 15 on; before, the collector has
// them within half a second), for a test that reads them from another
// session.
func flushStats(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), `
DO $$ BEGIN
    IF current_setting('server_version_num')::int >= 150000 THEN
        PERFORM pg_stat_force_next_flush();
    END IF;
END $$`); err != nil {
		t.Fatalf("flush statistics: %v", err)
	}
}

// awaitTableStats reads c's table figures until done accepts them, for
// ten seconds at most (the statistics reach other sessions a moment after
// the transactions that made them).
func awaitTableStats(t *testing.T, c *contender, done func(counters) bool) counters {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var cur counters
		err := tableStats(context.Background(), c, &cur)
		if err != nil {
			t.Fatalf("tableStats: %v", err)
		}
		if done(cur) || time.Now().After(deadline) {
			return cur
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tableStats counts a migrated schema's partitioned archive over its
// partitions (a row in each of two) and the disk of the relay's four
// tables over theirs, as summing pg_total_relation_size over the schema's
// plain tables of those names and their partitions' does; it counts
// refloop's plain tables as themselves; a hot table not there yet is
// pgx.ErrNoRows, another table missing an error naming it. It needs
// PostgreSQL (TEST_DATABASE_URL) and fails, never skips, without.
func TestTableStats(t *testing.T) {
	ctx := context.Background()
	t.Run("relay", func(t *testing.T) {
		s := dbtest.New(t)
		conn := s.Conn(t)
		var parts int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_partition_tree($1::regclass) WHERE isleaf", s.Table("archive")).Scan(&parts); err != nil || parts < 2 {
			t.Fatalf("the archive's partitions: %d, %v; want it partitioned, in two at least", parts, err)
		}
		// Half the rows in the first partition, half in the last.
		q := strings.ReplaceAll(`
INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts, delivered_at)
SELECT g, 't', '\x00', 'k' || g, now(), 1,
       (SELECT CASE WHEN g % 2 = 0 THEN min(upper_bound) ELSE max(upper_bound) END FROM %s.history_partitions('archive')) - interval '1 second'
  FROM generate_series(1, 100) AS g`, "%s", pgx.Identifier{s.Name}.Sanitize())
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("fill the archive: %v", err)
		}
		if _, err := conn.Exec(ctx, "DELETE FROM "+s.Table("archive")+" WHERE id <= 10"); err != nil {
			t.Fatal(err)
		}
		// Rows leaving the hot table are the rows delivered.
		if _, err := conn.Exec(ctx, "INSERT INTO "+s.Table("messages")+" (topic, payload) SELECT 't', 'x' FROM generate_series(1, 5)"); err != nil {
			t.Fatal(err)
		}
		// The hot table rotates: the rows are in a former generation,
		// messages_g1, and are counted there.
		if _, err := conn.Exec(ctx, "SELECT * FROM "+pgx.Identifier{s.Name}.Sanitize()+".messages_rotate('0 s', '1 s')"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "DELETE FROM "+s.Table("messages_all")+" WHERE id IN (SELECT id FROM "+s.Table("messages_g1")+" ORDER BY id LIMIT 3)"); err != nil {
			t.Fatal(err)
		}
		var used int
		if err := conn.QueryRow(ctx, "SELECT count(DISTINCT tableoid) FROM "+s.Table("archive")).Scan(&used); err != nil || used != 2 {
			t.Fatalf("the archive's rows lie in %d partitions (%v), want 2", used, err)
		}
		flushStats(t, conn)

		c := &contender{stats: s.Pool, hotSchema: s.Name, hot: "messages_all", archived: "archive", tables: relayTables}
		cur := awaitTableStats(t, c, func(c counters) bool { return c.hotDel == 3 && c.archDead == 10 })
		if cur.hotDel != 3 || cur.archDead != 10 {
			t.Errorf("%d rows deleted from the hot table, %d dead tuples in the archive; want 3, 10 (summed over its partitions)", cur.hotDel, cur.archDead)
		}
		var disk int64
		if err := conn.QueryRow(ctx, `
SELECT sum(pg_catalog.pg_total_relation_size(oid))::bigint FROM pg_catalog.pg_class
 WHERE relnamespace = $1::regnamespace AND relkind = 'r'
   AND relname ~ '^(messages(_all|_g\d)?|dead_letters|archive(_before_partitions|_\d{8}_\d{6})?|delivered_keys(_before_partitions|_\d{8}_\d{6})?)$'`,
			pgx.Identifier{s.Name}.Sanitize()).Scan(&disk); err != nil {
			t.Fatal(err)
		}
		if cur.diskBytes != disk || disk == 0 {
			t.Errorf("disk %d bytes, want %d: the relay's tables and their partitions", cur.diskBytes, disk)
		}

		c.tables = append(slices.Clone(relayTables), "no_such_table")
		if err := tableStats(ctx, c, &cur); err == nil || !strings.Contains(err.Error(), "no_such_table") {
			t.Errorf("a missing table: %v, want an error naming it", err)
		}
	})

	t.Run("plain", func(t *testing.T) {
		s := dbtest.NewEmpty(t)
		c := &contender{stats: s.Pool, hotSchema: s.Name, hot: "outbox", archived: "outbox_archive", tables: []string{"outbox", "outbox_archive"}}
		var cur counters
		if err := tableStats(ctx, c, &cur); !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("before the tables: %v, want pgx.ErrNoRows", err)
		}
		conn := s.Conn(t)
		for _, q := range []string{
			"CREATE SCHEMA %s",
			"CREATE TABLE %s.outbox (id bigint PRIMARY KEY, payload bytea NOT NULL)",
			"CREATE TABLE %s.outbox_archive (id bigint PRIMARY KEY, payload bytea NOT NULL)",
			"INSERT INTO %s.outbox SELECT g, '\\x00' FROM generate_series(1, 30) AS g",
			"INSERT INTO %s.outbox_archive SELECT g, '\\x00' FROM generate_series(1, 20) AS g",
			"DELETE FROM %s.outbox_archive WHERE id <= 5",
			"DELETE FROM %s.outbox WHERE id <= 7",
		} {
			if _, err := conn.Exec(ctx, strings.ReplaceAll(q, "%s", pgx.Identifier{s.Name}.Sanitize())); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		flushStats(t, conn)
		cur = awaitTableStats(t, c, func(c counters) bool { return c.hotIns == 30 && c.hotDel == 7 && c.archDead == 5 })
		if cur.hotIns != 30 || cur.hotDel != 7 || cur.archDead != 5 {
			t.Errorf("%d inserts in the hot table, %d deletes, %d dead tuples in the archive; want 30, 7, 5", cur.hotIns, cur.hotDel, cur.archDead)
		}
		var disk int64
		if err := conn.QueryRow(ctx, "SELECT (pg_catalog.pg_total_relation_size($1::regclass) + pg_catalog.pg_total_relation_size($2::regclass))::bigint",
			s.Name+".outbox", s.Name+".outbox_archive").Scan(&disk); err != nil {
			t.Fatal(err)
		}
		if cur.diskBytes != disk || disk == 0 {
			t.Errorf("disk %d bytes, want %d: the two tables", cur.diskBytes, disk)
		}
	})
}

// buildPinBinaries builds the relay and the in-repository reference loop
// (internal/benchkit/yardstick) as refloop, for the pinned-horizon runs.
func buildPinBinaries(t *testing.T) (bin, refloop string) {
	t.Helper()
	bin = filepath.Join(t.TempDir(), "outbox-relay")
	refloop = filepath.Join(t.TempDir(), "refloop")
	for target, pkg := range map[string]string{bin: ".", refloop: "./internal/benchkit/yardstick"} {
		build := exec.Command("go", "build", "-o", target, pkg)
		build.Dir = "../../.."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return bin, refloop
}

// TestPinHorizon runs the benchmark for a few seconds at a small rate,
// with the in-repository reference loop (internal/benchkit/yardstick) as refloop,
// on a PostgreSQL it starts with initdb: it fails, never skips, when
// PostgreSQL is not installed (.ci/prerequisites installs it).
func TestPinHorizon(t *testing.T) {
	bin, refloop := buildPinBinaries(t)
	report := filepath.Join(t.TempDir(), "report.json")
	o := pinOptions{
		Binary: bin, Refloop: refloop, Duration: 6 * time.Second, Every: 2 * time.Second, PinAfter: 2 * time.Second,
		Rate: 50, Producers: 2, PayloadBytes: 256, JSON: report,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := runPinHorizon(ctx, o, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| after | unpinned: dead tuples / claim mean |", "summary after 6s, pinned (held snapshot) / unpinned",
		"refloop pinned: its own result", "relay pinned / refloop pinned claim mean", "tables' disk at the end"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if len(rep.Contenders) != 3 {
		t.Fatalf("%d contenders, want the two relays and refloop", len(rep.Contenders))
	}
	for _, c := range rep.Contenders {
		if len(c.Samples) != 3 {
			t.Fatalf("%s: %d samples, want 3", c.Name, len(c.Samples))
		}
		var delivered, claims int64
		for _, s := range c.Samples {
			delivered += s.Delivered
			claims += s.Claims
		}
		last := c.Samples[2]
		switch {
		case delivered < 100:
			t.Errorf("%s: %d rows delivered, want about 300", c.Name, delivered)
		case claims == 0 || last.ClaimMeanMs <= 0:
			t.Errorf("%s: no claim found in pg_stat_statements (%d claims)", c.Name, claims)
		case c.Kind == "refloop" && (c.Refloop == nil || !c.Refloop.Verified || c.Refloop.P99ms == nil):
			t.Errorf("%s: its result line %+v, want one verified, with a p99", c.Name, c.Refloop)
		case c.Kind == "relay" && (last.ClaimP99Ms == nil || c.CommitReceiptP99Ms == nil):
			t.Errorf("%s: no claim p99 or no commit→receipt p99", c.Name)
		case !last.PinHeld:
			t.Errorf("%s: the last sample does not know the pin was held", c.Name)
		case c.Pinned && (last.XminAge == 0 || last.DeadTuples == 0):
			t.Errorf("%s: pinned, but oldest xmin age %d, %d dead tuples", c.Name, last.XminAge, last.DeadTuples)
		case last.TablesDiskBytes == 0:
			t.Errorf("%s: no disk for its tables", c.Name)
		}
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var back pinReport
	if err := json.Unmarshal(data, &back); err != nil || len(back.Contenders) != 3 || back.SummaryLine == "" {
		t.Errorf("the JSON report does not read back: %v", err)
	}
}

// TestPinHorizon_PinHow runs the benchmark as TestPinHorizon does with the
// two other pins: with xid, the pinned databases' oldest xmin age (their
// sessions' xids counted) grows from one sample to the next while the pin
// holds; with readers, every pinned database's readers committed read
// transactions, and the unpinned one has none. Both name their pin in the
// table, the summary and the JSON report.
func TestPinHorizon_PinHow(t *testing.T) {
	bin, refloop := buildPinBinaries(t)
	for _, how := range []string{pinHowXID, pinHowReaders} {
		t.Run(how, func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "report.json")
			o := pinOptions{
				Binary: bin, Refloop: refloop, Duration: 6 * time.Second, Every: 2 * time.Second, PinAfter: 2 * time.Second,
				Rate: 50, Producers: 2, PayloadBytes: 256, JSON: report, PinHow: how,
				// An idle xid holds every database of its server: the
				// unpinned ones run on a second server, as main's default.
				ServerEach: how == pinHowXID,
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var out bytes.Buffer
			rep, err := runPinHorizon(ctx, o, &out)
			t.Log(out.String())
			if err != nil {
				t.Fatal(err)
			}
			label := pinLabel(how)
			for _, want := range []string{"pin (" + label + ") held from", "| pinned (" + label + "): dead tuples",
				"summary after 6s, pinned (" + label + ") / unpinned"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q", want)
				}
			}
			if len(rep.Contenders) != 3 {
				t.Fatalf("%d contenders, want the two relays and refloop", len(rep.Contenders))
			}
			for _, c := range rep.Contenders {
				if len(c.Samples) != 3 {
					t.Fatalf("%s: %d samples, want 3", c.Name, len(c.Samples))
				}
				held, last := c.Samples[1], c.Samples[2]
				switch {
				case !held.PinHeld || !last.PinHeld:
					t.Errorf("%s: the samples after the pin do not know it was held", c.Name)
				case how == pinHowXID && c.Pinned && (held.XminAge == 0 || last.XminAge <= held.XminAge):
					t.Errorf("%s: pinned by an idle xid, but oldest xmin age %d, then %d: want it growing", c.Name, held.XminAge, last.XminAge)
				case how == pinHowReaders && c.Pinned && c.PinReads == 0:
					t.Errorf("%s: pinned by readers, but they committed no read transaction", c.Name)
				case how == pinHowReaders && !c.Pinned && c.PinReads != 0:
					t.Errorf("%s: unpinned, but %d read transactions of the pin's readers", c.Name, c.PinReads)
				case c.Pinned && last.DeadTuples == 0:
					t.Errorf("%s: pinned, but no dead tuples", c.Name)
				}
				t.Logf("%s: oldest xmin age %d, %d, %d; %d read transactions of the pin's readers",
					c.Name, c.Samples[0].XminAge, held.XminAge, last.XminAge, c.PinReads)
			}
			if how == pinHowXID {
				var pinnedURL, unpinnedURL string
				for _, c := range rep.Contenders {
					if c.Kind != "relay" {
						continue
					}
					if c.Pinned {
						pinnedURL = c.url
					} else {
						unpinnedURL = c.url
					}
				}
				pu, _ := url.Parse(pinnedURL)
				uu, _ := url.Parse(unpinnedURL)
				if pu == nil || uu == nil || pu.Host == uu.Host {
					t.Errorf("-server-each: the pinned relay's database %s and the unpinned one's %s are on one server", pinnedURL, unpinnedURL)
				}
			}
			if how == pinHowReaders && !strings.Contains(out.String(), "read transactions of the pin's readers") {
				t.Errorf("output lacks the readers' read transactions")
			}
			data, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			var back pinReport
			if err := json.Unmarshal(data, &back); err != nil || back.Options.PinHow != how {
				t.Errorf("the JSON report does not record -pin-how %s: %v, %q", how, err, back.Options.PinHow)
			}
		})
	}
}
