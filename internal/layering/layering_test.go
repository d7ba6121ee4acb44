// Package layering holds the test that keeps the package layout's import
// rules true: main → internal/cli → internal/fleet → relay → sinks → outbox,
// sinks never import relay, outbox imports nothing of ours, the engine's
// background concerns and protocols (relay/internal/...) know nothing of
// the relay, and the shipped binary links no test-only package.
package layering

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/outbox-relay/outbox-relay"

// allowed lists, for each of our non-test packages (a trailing /... covers
// its sub-packages), which of our packages it may import. A package of ours
// that matches no rule fails the test, so new packages get a rule.
var allowed = []struct {
	pkg     string
	imports []string
}{
	{"", []string{"internal/cli"}}, // main: thin, everything is in internal/cli
	{"outbox", nil},
	{"migrations", []string{"outbox"}},
	{"sinks", []string{"outbox"}},
	{"sinks/sinktest", []string{"sinks", "outbox"}},
	// What the SQS and SNS sinks share: the mapping of keys onto AWS message
	// group and deduplication ids (awsids), and of a row onto a message's
	// body and attributes (awsmsg).
	{"sinks/internal/...", []string{"sinks", "outbox"}},
	{"sinks/sqs", []string{"sinks", "outbox", "sinks/internal/awsids", "sinks/internal/awsmsg"}},
	{"sinks/sns", []string{"sinks", "outbox", "sinks/internal/awsids", "sinks/internal/awsmsg"}},
	{"sinks/...", []string{"sinks", "outbox"}}, // each destination: never relay, never another sink
	{"relay", []string{"sinks", "outbox", "relay/internal/..."}},
	// A background concern or protocol of the engine (bucket ownership, the
	// claim floor, the horizon readings, liveness, …) is a package under
	// relay/internal/ with Config, Hooks and Run(ctx), importing nothing of
	// ours (pgx and the standard library): *relay.Relay only wires it
	// (docs/development.md, "The engine's rule").
	{"relay/internal/...", nil},
	{"relay/admin", []string{"outbox", "relay/internal/horizon"}},
	// The web console: pages over relay/admin, never the engine.
	{"relay/console", []string{"relay/admin", "outbox"}},
	{"internal/cli", []string{"internal/fleet", "relay", "relay/admin", "relay/console", "sinks", "sinks/...", "outbox", "migrations", "internal/bench", "internal/gctune"}},
	{"internal/fleet", []string{"relay", "outbox"}}, // one relay per outbox: never the CLI, never a sink
	{"internal/bench", []string{"relay", "sinks", "sinks/nats", "outbox", "migrations"}},
	{"internal/benchkit/benchcmp", []string{"internal/bench", "internal/gctune", "relay", "outbox"}},
	{"internal/gctune", nil}, // the Go collector's settings: the standard library only
	// The test kits and the developer benchmarks, grouped apart from what the
	// binary contains (TestShippedBinaryLinksNoTestOnlyPackage).
	{"internal/testkit/dbtest", []string{"migrations", "outbox"}},
	{"internal/testkit/natstest", nil},
	{"internal/testkit/kafkatest", nil},
	{"internal/testkit/pubsubtest", nil},
	{"internal/testkit/tlstest", nil},
	{"internal/testkit/rabbitmqtest", []string{"internal/testkit/waitfor"}},
	{"internal/testkit/redistest", nil},
	{"internal/testkit/browsertest", nil}, // a headless Chromium through chromedp
	{"internal/testkit/sqstest", nil},
	{"internal/testkit/relaytest", []string{"internal/testkit/dbtest", "internal/testkit/natstest", "internal/testkit/waitfor", "relay"}},
	{"internal/testkit/webhooktest", []string{"sinks/sinktest"}},
	{"internal/testkit/testlog", nil}, // the tests' logger: the standard library only
	{"internal/testkit/golden", nil},  // the golden SQL files: the standard library only
	{"internal/testkit/waitfor", nil},
	{"internal/benchkit/yardstick", nil},
	{"examples", nil}, // its tests check the docs against the examples
	{"examples/...", []string{"outbox"}},
	{"internal/layering", nil},
}

// testOnly are packages the shipped binary must not link, besides every
// package under testOnlyTrees.
var testOnly = []string{
	"testing",
	"net/http/httptest",
	"github.com/prometheus/client_golang/prometheus/testutil",
	"github.com/nats-io/nats-server/v2/server",
	"github.com/twmb/franz-go/pkg/kfake",
	"go.opentelemetry.io/otel/sdk/trace/tracetest",
	"github.com/standard-webhooks/standard-webhooks/libraries/go",
	"github.com/chromedp/chromedp",
	module + "/sinks/sinktest",
	module + "/internal/benchkit/benchcmp",
	module + "/internal/benchkit/yardstick",
}

func goList(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// matches reports whether rel (a path relative to the module) is covered by
// pattern.
func matches(pattern, rel string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return strings.HasPrefix(rel, base+"/")
	}
	return pattern == rel
}

func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

func TestImportRules(t *testing.T) {
	out := goList(t, "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	sc := bufio.NewScanner(bytes.NewReader(out))
	checked := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg, _ := rel(fields[0])
		i := slices.IndexFunc(allowed, func(r struct {
			pkg     string
			imports []string
		}) bool {
			return matches(r.pkg, pkg)
		})
		if i < 0 {
			t.Errorf("package %q has no import rule in layering_test.go: add one", fields[0])
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			r, ours := rel(imp)
			if !ours {
				continue
			}
			if !slices.ContainsFunc(allowed[i].imports, func(p string) bool { return matches(p, r) }) {
				t.Errorf("%s imports %s, which its rule (%q may import %q) forbids", fields[0], imp, allowed[i].pkg, allowed[i].imports)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d packages: go list output unexpected:\n%s", checked, out)
	}
}

// testOnlyTrees hold the test kits and the developer benchmarks, grouped
// apart from what the binary contains.
var testOnlyTrees = []string{module + "/internal/testkit/", module + "/internal/benchkit/"}

func TestShippedBinaryLinksNoTestOnlyPackage(t *testing.T) {
	deps := strings.Fields(string(goList(t, "-deps", module)))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed only %d packages", len(deps))
	}
	for _, p := range testOnly {
		if slices.Contains(deps, p) {
			t.Errorf("the binary links %s, a test-only package", p)
		}
	}
	for _, d := range deps {
		for _, tree := range testOnlyTrees {
			if strings.HasPrefix(d, tree) {
				t.Errorf("the binary links %s, a package of the test kits or the benchmarks", d)
			}
		}
	}
}

// TestLayoutNamesEveryEngineFile keeps docs/development.md's layout map
// true to the engine: every source file of relay/ and every package under
// relay/internal/ is named there, so that the map shows what the engine is
// made of and a new file says what it is for.
func TestLayoutNamesEveryEngineFile(t *testing.T) {
	doc, err := os.ReadFile("../../docs/development.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(doc), "## Layout")
	if !ok {
		t.Fatal("docs/development.md has no Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	files, err := filepath.Glob("../../relay/*.go")
	if err != nil || len(files) < 10 {
		t.Fatalf("relay/*.go: %d files, %v", len(files), err)
	}
	for _, f := range files {
		if name := filepath.Base(f); !strings.HasSuffix(name, "_test.go") && !strings.Contains(layout, name) {
			t.Errorf("docs/development.md's layout does not name relay/%s: say what it is for", name)
		}
	}
	dirs, err := os.ReadDir("../../relay/internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !strings.Contains(layout, d.Name()+"/") {
			t.Errorf("docs/development.md's layout does not name relay/internal/%s/", d.Name())
		}
	}
}
