package main

import (
	"cmp"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The pure parts of -many-outboxes (many.go): naming the statements
// pg_stat_statements recorded, summing them, the schemas a relay's
// /metrics serve, and the trickle's latencies.

// stmtRow is one entry of pg_stat_statements: a statement of one database.
type stmtRow struct {
	QueryID int64
	Query   string
	Calls   int64
	ExecMs  float64
}

// stmtGroup is what statements of one kind cost over a window: those of
// every outbox alike (they differ only by their schema) are one group.
type stmtGroup struct {
	Label      string  `json:"label"`
	CallsPerS  float64 `json:"calls_per_s"`
	ExecMsPerS float64 `json:"exec_ms_per_s"`
	Distinct   int     `json:"distinct_statements"` // one per outbox, usually
	Example    string  `json:"example"`
}

var (
	// Parameters (pgx's @name, the server's $1) and what the server makes
	// parameters of: literals, numbers, true, false and null.
	paramRE = regexp.MustCompile(`@[a-z_][a-z0-9_]*|\$[0-9]+|'(?:[^']|'')*'|\b[0-9]+(?:\.[0-9]+)?\b|\b(?:true|false|null)\b`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// normalizeStatement is a statement's text with its schema names (any of
// schemas, quoted or not) written S, its parameters (pgx's @name, the
// server's $1) and constants (which pg_stat_statements records as
// parameters) written ?, in lower case on one line: statements that differ
// only by their outbox are equal, and the relay's golden statements
// (relay/testdata, written for schema "outbox" with named parameters and
// constants) equal what pg_stat_statements records of them.
func normalizeStatement(q string, schemas *regexp.Regexp) string {
	q = strings.ToLower(strings.TrimSpace(spaceRE.ReplaceAllString(stripLeadingComments(q), " ")))
	if schemas != nil {
		q = schemas.ReplaceAllString(q, "S")
	}
	return paramRE.ReplaceAllString(q, "?")
}

// schemaPattern matches the names given, quoted or not, as whole words.
func schemaPattern(names []string) *regexp.Regexp {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(strings.ToLower(n))
	}
	return regexp.MustCompile(`"?\b(?:` + strings.Join(quoted, "|") + `)\b"?`)
}

// goldenStatements reads the relay's golden statements under dir (its
// relay/testdata: <mode>/<name>.sql), normalized, by their name
// (unordered/claim.sql); none when dir is missing.
func goldenStatements(dir string) map[string]string {
	out := map[string]string{}
	re := schemaPattern([]string{"outbox"})
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sql") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err == nil {
			rel, _ := filepath.Rel(dir, path)
			out[filepath.ToSlash(rel)] = normalizeStatement(string(data), re)
		}
		return nil
	})
	return out
}

// findGolden returns the first of dirs that exists (relay/testdata from
// the repository's root, or from this package's directory in its tests).
func findGolden(dirs ...string) string {
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// relayLoops says which of the relay's loops runs a golden statement, by
// its name without the mode's directory.
var relayLoops = map[string]string{
	"claim":                  "claim loops (claim.go)",
	"claim_lanes":            "claim loops (claim.go)",
	"claim_unkeyed":          "claim loops (claim.go)",
	"claim_held_keys":        "claim loops (claim.go)",
	"floor":                  "claim floor refresh (floor.go)",
	"relays_heartbeat":       "heartbeat (registry.go)",
	"measure_claim":          "claim sample (claimsample.go)",
	"gauge_backlog":          "gauges (stats.go)",
	"gauge_horizon":          "gauges (stats.go)",
	"gauge_table_health":     "gauges (stats.go)",
	"gauge_keys":             "gauges (stats.go)",
	"autovacuum":             "autovacuum check (autovacuum.go)",
	"archive_delete_expired": "retention (retention.go)",
	"keys_delete_expired":    "retention (retention.go)",
	"settle":                 "settle",
}

// labelStatement names a normalized statement: the golden statement it
// is (shared/floor.sql, with its loop), or the one that shares the longest
// beginning with it (at least 60 characters: a statement the server
// recorded with constants made parameters), else the statement's own
// beginning.
func labelStatement(norm string, golden map[string]string) string {
	best, bestLen := "", 0
	for name, g := range golden {
		n := commonPrefix(g, norm)
		if g == norm {
			n = math.MaxInt // the same statement: several modes may share it
		}
		if n >= 60 && (n > bestLen || n == bestLen && name < best) {
			best, bestLen = name, n
		}
	}
	if best != "" {
		base := strings.TrimSuffix(filepath.Base(best), ".sql")
		if loop, ok := relayLoops[base]; ok {
			return loop + ": " + best
		}
		return best
	}
	if len(norm) > 70 {
		return norm[:70] + "…"
	}
	return norm
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// groupStatements sums the statements run between two readings of
// pg_stat_statements (before, after: by queryid), over seconds, by their
// normalized text; most called first. A statement absent before was first
// run in the window.
func groupStatements(before, after map[int64]stmtRow, seconds float64, schemas *regexp.Regexp, golden map[string]string) (groups []stmtGroup, calls int64, execMs float64) {
	byText := map[string]*stmtGroup{}
	for id, a := range after {
		b := before[id]
		dc, dt := a.Calls-b.Calls, a.ExecMs-b.ExecMs
		if dc <= 0 {
			continue
		}
		calls += dc
		execMs += dt
		norm := normalizeStatement(a.Query, schemas)
		g := byText[norm]
		if g == nil {
			g = &stmtGroup{Label: labelStatement(norm, golden), Example: norm}
			byText[norm] = g
		}
		g.CallsPerS += float64(dc) / seconds
		g.ExecMsPerS += dt / seconds
		g.Distinct++
	}
	for _, g := range byText {
		groups = append(groups, *g)
	}
	slices.SortFunc(groups, func(a, b stmtGroup) int {
		return cmp.Or(cmp.Compare(b.CallsPerS, a.CallsPerS), cmp.Compare(a.Label, b.Label))
	})
	return groups, calls, execMs
}

// schemasServed counts the outboxes a relay's /metrics (text format)
// report claims for: the values of the schema label of the claim
// histogram's count, or one when it has no schema label (a relay serving
// one outbox).
func schemasServed(metrics string) int {
	const name = "outbox_relay_claim_duration_seconds_count"
	seen := map[string]bool{}
	unlabelled := false
	for line := range strings.SplitSeq(metrics, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		_, v, ok := strings.Cut(rest, `schema="`)
		if !ok {
			unlabelled = true
			continue
		}
		v, _, _ = strings.Cut(v, `"`)
		seen[v] = true
	}
	if len(seen) == 0 && unlabelled {
		return 1
	}
	return len(seen)
}

// trickleRow is one row of the trickle: when its commit returned and when
// the subscriber received it (zero when it did not).
type trickleRow struct {
	Commit, Received time.Time
}

// latencyStats are the commit → receipt latencies of a span of the
// trickle.
type latencyStats struct {
	Rows    int     `json:"rows"`
	Missing int     `json:"missing"` // committed in the span, never received
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// trickleLatencies sums up the rows committed in [from, to).
func trickleLatencies(rows []trickleRow, from, to time.Time) latencyStats {
	var d []time.Duration
	var s latencyStats
	for _, r := range rows {
		if r.Commit.Before(from) || !r.Commit.Before(to) {
			continue
		}
		if r.Received.IsZero() {
			s.Missing++
			continue
		}
		d = append(d, r.Received.Sub(r.Commit))
	}
	s.Rows = len(d)
	if len(d) > 0 { // zeros otherwise: JSON has no NaN
		s.P50Ms, s.P99Ms = quantileMs(d, 0.50), quantileMs(d, 0.99)
		s.MaxMs = float64(slices.Max(d)) / 1e6
	}
	return s
}

// quantileMs is the q-quantile of d in milliseconds (nearest rank, as
// p99ms), NaN for none.
func quantileMs(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[int(float64(len(s)-1)*q)]) / 1e6
}
