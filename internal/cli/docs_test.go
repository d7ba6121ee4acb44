package cli

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// The README is short and the reference lives in docs/, one page per
// concern. These tests keep both true to the code: the generated parts
// (configuration, alerts, grants) are regenerated with -update, the
// command line and the metrics are compared with what the binary has, and
// every link between the pages resolves.

var update = flag.Bool("update", false, "rewrite the generated sections of the docs")

const (
	configPage     = "docs/configuration.md"
	operationsPage = "docs/operations.md"
	benchmarksPage = "docs/benchmarks.md"
	securityPage   = "docs/security.md"
	alertsPage     = "docs/alerts.md"
)

// readDoc returns a file of the repository as a string.
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(repoFile(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkGenerated compares the text between the markers begin and end of
// page with want, or with -update writes want there. regen is the command
// that rewrites it, for the failure message.
func checkGenerated(t *testing.T, page, begin, end, want, what, regen string) {
	t.Helper()
	s := readDoc(t, page)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s … %s section", page, begin, end)
	}
	start := i + strings.Index(s[i:], "-->") + len("-->\n")
	if *update {
		if err := os.WriteFile(repoFile(page), []byte(s[:start]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if s[start:j] != want {
		t.Errorf("%s: %s; run %s", page, what, regen)
	}
}

// envTable renders the configuration reference as docs/configuration.md
// shows it.
func envTable() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
	for _, v := range envReference() {
		def := "unset"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		meaning := v.Doc + " Allowed: " + v.Allowed + "."
		b.WriteString("| `" + v.Name + "` | " + def + " | " + strings.ReplaceAll(meaning, "|", `\|`) + " |\n")
	}
	return b.String()
}

func TestDocs_ConfigReference(t *testing.T) {
	checkGenerated(t, configPage, "<!-- config:begin", "<!-- config:end -->", envTable(),
		"the configuration reference is out of step with the configuration",
		"go test ./internal/cli -run TestDocs_ConfigReference -update to regenerate it from the struct tags")
}

// helpOutput returns what `outbox-relay help` prints.
func helpOutput(t *testing.T) string {
	t.Helper()
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"help"}, nil, &stdout, &stderr); code != exitOK {
		t.Fatalf("help: exit %d\n%s", code, stderr.String())
	}
	return stdout.String()
}

// envName is how the docs write a variable of the relay's: a name with one
// of its prefixes (RELAY_ or a sink's), ending in a letter or a digit (so
// NATS_TLS_* is a pattern, not a name).
var envName = regexp.MustCompile(`\b(?:DATABASE_URL(?:_FILE)?|LOG_(?:LEVEL|FORMAT)|(?:` + strings.Join(relayPrefixes(), "|") + `)_[A-Z0-9_]*[A-Z0-9])\b`)

// relayPrefixes returns RELAY and each sink's prefix, without their
// underscores.
func relayPrefixes() []string {
	out := []string{"RELAY"}
	for _, k := range sinkKinds {
		out = append(out, strings.TrimSuffix(k.prefix, "_"))
	}
	return out
}

// TestDocs_VariablesAgreeWithHelp keeps the three places that name the
// variables in agreement: every variable of the configuration is in
// `outbox-relay help` and in docs/configuration.md's table, and every
// variable the README or a docs page names is one the relay reads.
func TestDocs_VariablesAgreeWithHelp(t *testing.T) {
	help := helpOutput(t)
	config := readDoc(t, configPage)
	known := map[string]bool{}
	for _, v := range envReference() {
		known[v.Name] = true
		if !strings.Contains(help, "\n  "+v.Name+" (default: ") {
			t.Errorf("outbox-relay help does not list %s", v.Name)
		}
		if !strings.Contains(config, "\n| `"+v.Name+"` | ") {
			t.Errorf("%s does not document %s", configPage, v.Name)
		}
	}
	for _, page := range docPages(t) {
		for _, name := range envName.FindAllString(readDoc(t, page), -1) {
			if !known[name] {
				t.Errorf("%s names %s, which the relay does not read", page, name)
				known[name] = true // once
			}
		}
	}
}

// helpCommands returns the command lines of `outbox-relay help`'s Flags
// section with their flags, and the names of its Commands section.
func helpCommands(t *testing.T) (names []string, flags map[string][]string) {
	t.Helper()
	flags = map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(helpOutput(t)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Commands:"):
			section = "commands"
		case strings.HasPrefix(line, "Flags"):
			section = "flags"
		case !strings.HasPrefix(line, "  "):
			section = ""
		case section == "commands":
			names = append(names, strings.Fields(line)[0])
		case section == "flags":
			var inv []string
			var fs []string
			for _, f := range strings.Fields(line) {
				switch {
				case strings.HasPrefix(f, "--"):
					fs = append(fs, f)
				case f != "(none)":
					inv = append(inv, f)
				}
			}
			flags[strings.Join(inv, " ")] = fs
		}
	}
	if len(names) == 0 || len(flags) == 0 {
		t.Fatalf("outbox-relay help: found no commands or no flags; has its layout changed?")
	}
	return names, flags
}

// commandPage is the page that documents a command's flags: the command
// line's page, or Benchmarks for bench.
func commandPage(inv string) string {
	if inv == "bench" {
		return benchmarksPage
	}
	return operationsPage
}

// TestDocs_DocumentEveryCommandAndFlag: every command and every flag that
// `outbox-relay help` lists is documented, the commands on the command
// line's page (docs/operations.md), each flag as a whole word on its
// command's page.
func TestDocs_DocumentEveryCommandAndFlag(t *testing.T) {
	names, flags := helpCommands(t)
	ops := readDoc(t, operationsPage)
	for _, name := range names {
		if !strings.Contains(ops, "`outbox-relay "+name) {
			t.Errorf("%s does not show outbox-relay %s", operationsPage, name)
		}
	}
	for inv, fs := range flags {
		if !strings.Contains(ops, "`outbox-relay "+inv) {
			t.Errorf("%s does not show outbox-relay %s", operationsPage, inv)
		}
		// The flags the help lists are those the command really takes.
		if want := commandFlags(strings.Fields(inv)); !slices.Equal(fs, want) {
			t.Errorf("help lists %v for %s; %s -h lists %v", fs, inv, inv, want)
		}
		page := commandPage(inv)
		doc := readDoc(t, page)
		for _, f := range fs {
			if !regexp.MustCompile(regexp.QuoteMeta(f) + `(?:[^a-z0-9-]|$)`).MatchString(doc) {
				t.Errorf("%s does not document outbox-relay %s %s", page, inv, f)
			}
		}
	}
}

func TestDocs_LeastPrivilegeGrants(t *testing.T) {
	grants := readDoc(t, "migrations/least_privilege.sql")
	checkGenerated(t, securityPage, "<!-- least-privilege:begin", "<!-- least-privilege:end -->", "```sql\n"+grants+"```\n",
		"the least-privilege grants differ from migrations/least_privilege.sql",
		"go test ./internal/cli -run TestDocs_LeastPrivilegeGrants -update to copy the file into the page")
}

// TestREADME_FirstScreen: the README's first screen (before its contents)
// has the command that runs the relay and the test command, and the test
// command is the one CI runs.
func TestREADME_FirstScreen(t *testing.T) {
	readme := readDoc(t, "README.md")
	first, _, ok := strings.Cut(readme, "\n## ")
	if !ok {
		t.Fatal("README.md has no ## section")
	}
	for _, block := range []string{"```sh\n", "docker compose up", "```sh\nmake test\n```\n"} {
		if !strings.Contains(first, block) {
			t.Errorf("README.md's first screen lacks %q", block)
		}
	}
	if n := strings.Count(first, "\n"); n > 40 {
		t.Errorf("README.md's first screen is %d lines: keep what comes before the contents under 40", n)
	}
	ci := readDoc(t, ".ci/run")
	if !regexp.MustCompile(`(?m)^[^#\n]*\bmake test\s*$`).MatchString(ci) {
		t.Error(".ci/run does not run the README's test command, make test")
	}
}

// docPages returns README.md and every docs/*.md, relative to the
// repository.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(repoFile("docs/*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, p := range pages {
		out = append(out, "docs/"+filepath.Base(p))
	}
	return out
}

var (
	mdFence    = regexp.MustCompile("(?ms)^```.*?^```[ \t]*$")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)`)
	mdHeading  = regexp.MustCompile(`(?m)^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	linkInText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// prose returns markdown without its fenced code blocks and code spans,
// where no link or heading can be.
func prose(md string) string {
	return codeSpan.ReplaceAllString(mdFence.ReplaceAllString(md, ""), "")
}

// anchorOf returns the anchor GitHub gives a heading: its text as
// rendered (markup and link targets gone), lower-cased, every character but
// letters, digits, spaces, hyphens and underscores dropped, spaces turned
// into hyphens.
func anchorOf(heading string) string {
	text := linkInText.ReplaceAllString(heading, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of md's headings (outside code blocks); a
// repeated anchor gets -1, -2, …, as on GitHub.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(md, ""), -1) {
		a := anchorOf(m[2])
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestDocs_Anchors(t *testing.T) {
	got := anchors("# outbox-relay\n## Trace context and CloudEvents\n### `outbox-relay status`\n" +
		"## Where PostgreSQL's time goes\n## Wake-up on insert (`RELAY_NOTIFY=true`)\n```\n# not a heading\n```\n" +
		"## Notes\n## Notes\n## Partitioned mode against `SKIP LOCKED`, measured\n## [Linked](x.md) text\n")
	want := []string{"outbox-relay", "trace-context-and-cloudevents", "outbox-relay-status", "where-postgresqls-time-goes",
		"wake-up-on-insert-relay_notifytrue", "notes", "notes-1", "partitioned-mode-against-skip-locked-measured", "linked-text"}
	for _, a := range want {
		if !got[a] {
			t.Errorf("no anchor %q in %v", a, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block counted as a heading")
	}
}

// TestDocs_LinksResolve: every relative link in the README and the docs
// leads to a file of the repository and, with a #fragment, to a heading of
// that page; every docs page is linked from the README; and every docs page
// opens with a contents list that links each of its sections.
func TestDocs_LinksResolve(t *testing.T) {
	pages := docPages(t)
	linked := map[string]bool{}
	for _, page := range pages {
		md := readDoc(t, page)
		for _, m := range mdLink.FindAllStringSubmatch(prose(md), -1) {
			target := m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s: link %s leaves the repository", page, target)
					continue
				}
				if _, err := os.Stat(repoFile(dest)); err != nil {
					t.Errorf("%s: link %s: no file %s", page, target, dest)
					continue
				}
			}
			if page == "README.md" {
				linked[dest] = true
			}
			if fragment == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %s: a fragment on a file that is not markdown", page, target)
				continue
			}
			if !anchors(readDoc(t, dest))[fragment] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", page, target, dest, fragment)
			}
		}
	}
	for _, page := range pages[1:] {
		if !linked[page] {
			t.Errorf("README.md does not link %s: add its line to the Documentation map", page)
		}
	}
	for _, page := range pages {
		checkContents(t, page, readDoc(t, page))
	}
}

// checkContents checks that md's "## Contents", its first section, links
// every other section (##) of the page.
func checkContents(t *testing.T, page, md string) {
	t.Helper()
	text := mdFence.ReplaceAllString(md, "")
	_, rest, ok := strings.Cut(text, "\n## Contents\n")
	if !ok {
		t.Errorf("%s has no ## Contents", page)
		return
	}
	if first := strings.Index(text, "\n## "); first != strings.Index(text, "\n## Contents\n") {
		t.Errorf("%s: ## Contents is not its first section", page)
	}
	list, _, _ := strings.Cut(rest, "\n## ")
	for _, m := range mdHeading.FindAllStringSubmatch(rest, -1) {
		if len(m[1]) != 2 {
			continue
		}
		if !strings.Contains(list, "](#"+anchorOf(m[2])+")") {
			t.Errorf("%s: the contents list does not link the section %q", page, m[2])
		}
	}
}

// TestDocs_MetricsDocumented: docs/operations.md's metrics table has a row
// for every metric the relay registers, with its type and labels, and no
// row for a metric it does not.
func TestDocs_MetricsDocumented(t *testing.T) {
	rr := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	if _, _, err := registerMetrics(rr); err != nil {
		t.Fatal(err)
	}
	for _, c := range rr.collectors {
		touchVector(t, c)
	}
	families, err := rr.Gather()
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)(?:\\{([a-z_,]+)\\})?` \\| ([a-z]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(readDoc(t, operationsPage), -1) {
		labels := strings.Split(m[2], ",")
		slices.Sort(labels)
		documented["outbox_relay_"+m[1]] = strings.Join(labels, ",") + " " + m[3]
	}
	served := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "outbox_relay_") {
			continue
		}
		served[name] = true
		var labels []string
		if ms := f.GetMetric(); len(ms) > 0 {
			for _, l := range ms[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		slices.Sort(labels)
		typ := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}[f.GetType()]
		want := strings.Join(labels, ",") + " " + typ
		got, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("%s's metrics table has no row for %s", operationsPage, name)
		case got != want:
			t.Errorf("%s documents %s with labels and type %q; the relay registers %q", operationsPage, name, got, want)
		}
	}
	if len(served) == 0 {
		t.Fatal("registerMetrics registered no outbox_relay_ metric: the test is broken")
	}
	for name := range documented {
		if !served[name] {
			t.Errorf("%s documents %s, which the relay does not register", operationsPage, name)
		}
	}
}

// TestDocs_MigrateOutputShowsTheLatestVersion: wherever the README or a
// docs page shows what `migrate` prints, it shows the version this binary
// migrates to (docs/operations.md showed 16 when the binary printed 25).
func TestDocs_MigrateOutputShowsTheLatestVersion(t *testing.T) {
	pages, err := filepath.Glob(repoFile("docs/*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, repoFile("README.md"))
	shown := regexp.MustCompile(`migrated to version (\d+) \((\d+) migrations applied\)`)
	want := strconv.Itoa(int(migrations.Latest()))
	found := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range shown.FindAllStringSubmatch(string(b), -1) {
			found++
			if m[1] != want || m[2] != want {
				t.Errorf("%s shows %q; migrate prints version %s now", filepath.Base(page), m[0], want)
			}
		}
	}
	if found == 0 {
		t.Error("no page shows what migrate prints (docs/operations.md did)")
	}
}
