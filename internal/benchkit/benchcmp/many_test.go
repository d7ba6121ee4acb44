package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// serverForm writes a golden statement as pg_stat_statements records it
// when the relay runs it on schema: its named parameters and constants
// numbered.
func serverForm(golden, schema string) string {
	q := strings.ReplaceAll(golden, `"outbox"`, `"`+schema+`"`)
	n := 0
	return regexp.MustCompile(`@[a-z_]+|'[^']*'|\b[0-9]+\b|\btrue\b`).ReplaceAllStringFunc(q, func(string) string {
		n++
		return fmt.Sprintf("$%d", n)
	})
}

// Every golden statement of the relay, as the server records it for any
// outbox, is named after itself (or a golden statement equal to it).
func TestLabelStatement(t *testing.T) {
	dir := "../../../relay/testdata"
	golden := goldenStatements(dir)
	if len(golden) < 10 {
		t.Fatalf("%d golden statements under %s", len(golden), dir)
	}
	re := schemaPattern([]string{"tenant_03", "hot"})
	for name := range golden {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		label := labelStatement(normalizeStatement(serverForm(string(data), "tenant_03"), re), golden)
		_, got, _ := strings.Cut(label, ": ")
		if got == "" {
			got = label
		}
		if golden[got] != golden[name] {
			t.Errorf("%s labelled %q", name, label)
		}
	}
	if got := labelStatement(normalizeStatement(serverForm(`SELECT now(), pg_current_snapshot()::text,
       pg_sequence_last_value('"outbox".messages_id_seq'::regclass),
       pg_current_xact_id()::text,
       (SELECT s.seqcache = 1 AND NOT s.seqcycle AND s.seqincrement > 0
          FROM pg_sequence AS s
         WHERE s.seqrelid = '"outbox".messages_id_seq'::regclass),
       (SELECT available_at FROM "outbox".messages
         WHERE available_at >= @start::timestamptz
         ORDER BY available_at
         LIMIT 1),
       (SELECT id FROM "outbox".messages
         WHERE id >= @start_id::bigint
         ORDER BY id
         LIMIT 1)`, "hot"), re), golden); got != "claim floor refresh (floor.go): shared/floor.sql" {
		t.Errorf("floor labelled %q", got)
	}
	// A statement no golden file holds keeps its own (shortened) text.
	if got := labelStatement(normalizeStatement("SELECT nspname FROM pg_namespace WHERE nspname LIKE $1", re), golden); got != "select nspname from pg_namespace where nspname like ?" {
		t.Errorf("unknown statement labelled %q", got)
	}
	long := "select " + strings.Repeat("x, ", 40) + "1"
	if got := labelStatement(normalizeStatement(long, re), golden); len(got) > 75 || !strings.HasSuffix(got, "…") {
		t.Errorf("long statement labelled %q", got)
	}
}

func TestNormalizeStatement(t *testing.T) {
	re := schemaPattern([]string{"tenant_00", "tenant_01"})
	for in, want := range map[string]string{
		`SELECT 1 FROM "tenant_00".messages WHERE id = $1`:                "select ? from S.messages where id = ?",
		"-- c\nselect  1\n\tfrom tenant_01.messages where id = @id":       "select ? from S.messages where id = ?",
		`SELECT 'it''s' FROM tenant_000.messages WHERE x IS NULL`:         "select ? from tenant_000.messages where x is ?",
		`UPDATE "tenant_00".relays SET t = now() + interval '10 seconds'`: "update S.relays set t = now() + interval ?",
	} {
		if got := normalizeStatement(in, re); got != want {
			t.Errorf("normalizeStatement(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGroupStatements(t *testing.T) {
	re := schemaPattern([]string{"tenant_00", "tenant_01"})
	before := map[int64]stmtRow{
		1: {1, `SELECT 1 FROM "tenant_00".messages WHERE id = $1`, 10, 1},
		2: {2, `SELECT 1 FROM "tenant_01".messages WHERE id = $1`, 5, 1},
		3: {3, `BEGIN`, 7, 0.5},
	}
	after := map[int64]stmtRow{
		1: {1, `SELECT 1 FROM "tenant_00".messages WHERE id = $1`, 30, 3},
		2: {2, `SELECT 1 FROM "tenant_01".messages WHERE id = $1`, 25, 3},
		3: {3, `BEGIN`, 7, 0.5},               // not run in the window
		4: {4, `COMMIT`, 10, 2},               // first run in the window
		5: {5, `SELECT x FROM other.t`, 0, 0}, // recorded, never completed
	}
	groups, calls, execMs := groupStatements(before, after, 10, re, nil)
	if calls != 50 || math.Abs(execMs-6) > 1e-9 {
		t.Errorf("calls %d, exec %.1f ms; want 50, 6", calls, execMs)
	}
	if len(groups) != 2 {
		t.Fatalf("groups %+v, want 2", groups)
	}
	if g := groups[0]; g.Label != "select ? from S.messages where id = ?" || g.CallsPerS != 4 || g.ExecMsPerS != 0.4 || g.Distinct != 2 {
		t.Errorf("first group %+v", g)
	}
	if g := groups[1]; g.Label != "commit" || g.CallsPerS != 1 || g.Distinct != 1 {
		t.Errorf("second group %+v", g)
	}
}

func TestSchemasServed(t *testing.T) {
	for text, want := range map[string]int{
		"": 0,
		`outbox_relay_claim_duration_seconds_count{schema="a"} 3
outbox_relay_claim_duration_seconds_count{schema="b",tenant="x"} 0
outbox_relay_claim_duration_seconds_count{schema="a",tenant="y"} 1
outbox_relay_claim_duration_seconds_sum{schema="c"} 1
outbox_relay_claim_duration_seconds_bucket{schema="d",le="+Inf"} 1`: 2,
		"outbox_relay_claim_duration_seconds_count 12\n":                 1,
		`outbox_relay_claim_duration_seconds_count_other{schema="a"} 1`:  0,
		`# HELP outbox_relay_claim_duration_seconds_count{schema="a"} x`: 0,
	} {
		if got := schemasServed(text); got != want {
			t.Errorf("schemasServed(%q) = %d, want %d", text, got, want)
		}
	}
}

func TestTrickleLatencies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var rows []trickleRow
	for i := range 100 { // commits at 0, 10, ... 990 ms, each received i+1 ms later
		rows = append(rows, trickleRow{Commit: at(10 * i), Received: at(10*i + i + 1)})
	}
	rows[50].Received = time.Time{} // lost
	s := trickleLatencies(rows, at(0), at(1000))
	if s.Rows != 99 || s.Missing != 1 || s.P50Ms != 50 || s.P99Ms != 99 || s.MaxMs != 100 {
		t.Errorf("whole span: %+v", s)
	}
	s = trickleLatencies(rows, at(100), at(200)) // rows 10..19
	if s.Rows != 10 || s.Missing != 0 || s.P50Ms != 15 || s.P99Ms != 19 || s.MaxMs != 20 {
		t.Errorf("rows 10-19: %+v", s)
	}
	if s := trickleLatencies(rows, at(2000), at(3000)); s.Rows != 0 || s.P99Ms != 0 {
		t.Errorf("empty span: %+v", s)
	}
	if !math.IsNaN(quantileMs(nil, 0.5)) {
		t.Error("quantile of nothing is not NaN")
	}
}

// TestManyOutboxes runs the benchmark with short windows, a few outboxes
// and a small backlog on a PostgreSQL it starts with initdb (as
// TestPinHorizon: it fails when PostgreSQL is not installed).
func TestManyOutboxes(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the relay: %v\n%s", err, out)
	}
	report := filepath.Join(t.TempDir(), "report.json")
	o := manyOptions{
		Binary: bin, Parts: []string{"idle", "fair"}, Outboxes: 3, Warmup: time.Second, Duration: 3 * time.Second,
		Baseline: time.Second, Backlog: 3000, TrickleRate: 20, TrickleAlone: 2 * time.Second, PayloadBytes: 256, JSON: report,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := runManyOutboxes(ctx, o, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| configuration | outboxes | statements/s |", "| trickle into cold | rows | p50 | p99 |", "claim loops (claim.go)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if len(rep.Idle) != 5 {
		t.Fatalf("%d idle rows, want the server alone and 4 configurations", len(rep.Idle))
	}
	for i, r := range rep.Idle[1:] {
		want := []int{3, 3, 3, 1}[i]
		// Every claim is a statement, but the claims come from the relay's
		// /metrics and the statements from pg_stat_statements, read a
		// moment apart: a claim per outbox may fall on either side of the
		// window's edges (2.6 statements/s against 3.0 claims/s once, at
		// about one claim a second per outbox).
		edges := float64(r.Outboxes) / o.Duration.Seconds()
		if r.Outboxes != want || r.ClaimsPerS <= 0 || r.StatementsPerS+edges < r.ClaimsPerS || r.Connections == 0 || len(r.Top) == 0 {
			t.Errorf("%s: %d outboxes (want %d), %.1f claims/s, %.1f statements/s, %d connections, %d statements", r.Name, r.Outboxes, want, r.ClaimsPerS, r.StatementsPerS, r.Connections, len(r.Top))
		}
	}
	if noBackoff, defaults := rep.Idle[1], rep.Idle[2]; defaults.ClaimsPerS >= noBackoff.ClaimsPerS {
		t.Errorf("claims/s with the defaults %.1f, without backoff %.1f: no backoff seen", defaults.ClaimsPerS, noBackoff.ClaimsPerS)
	}
	f := rep.Fair
	if f == nil || f.DrainS <= 0 || f.Alone.Rows < minAloneRows || f.Alone.Missing > 0 || f.StreamMsgs < uint64(o.Backlog) {
		t.Errorf("fairness: %+v", f)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var back manyReport
	if err := json.Unmarshal(data, &back); err != nil || len(back.Idle) != 5 || back.Fair == nil {
		t.Errorf("the JSON report does not read back: %v", err)
	}
}
