package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		"refloop pinned: its own result", "relay pinned / refloop pinned claim mean"} {
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
