package cli

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// developmentPage is where the places a new sink touches are listed.
const developmentPage = "docs/development.md"

// addingASink is what docs/development.md's "Adding a sink" must name:
// the places a new sink touches, each checked for every sink by
// TestSinkKinds_HaveWhatAddingASinkLists or by the test named with it.
var addingASink = []string{
	"sinks/<name>", "sinktest.Run", "sinktest.RunHostile", "sinktest.FuzzHostile",
	"internal/cli/sink_<name>.go", "sinkKind", "sinkKinds",
	"hostileSinks", "settingsBase", "sampleValues", "docs/sinks.md", "docs/operations.md", "docs/security.md",
	"TestDocs_ConfigReference", "values.schema.json", "_helpers.tpl",
}

// TestSinkKinds_HaveWhatAddingASinkLists holds every registered sink to
// the list of docs/development.md, Adding a sink: its package under
// sinks/ runs the conformance and hostile-row suites, its file in
// internal/cli declares its variables under its prefix with an enabling
// variable and a delivery timeout that RELAY_LEASE covers, and the test
// lists, docs/sinks.md, docs/operations.md and docs/security.md have it.
func TestSinkKinds_HaveWhatAddingASinkLists(t *testing.T) {
	t.Parallel()
	section := docSection(t, developmentPage, "Adding a sink")
	for _, want := range addingASink {
		if !strings.Contains(section, want) {
			t.Errorf("%s, Adding a sink, does not name %s, which this test requires of every sink", developmentPage, want)
		}
	}

	fields := configFields()
	samples := sampleFiles(t)
	base, err := loadConfig(withSamples(samples, settingsBase))
	if err != nil {
		t.Fatalf("settingsBase: %v", err)
	}
	sinksPage := readDoc(t, "docs/sinks.md")
	untrusted := docSection(t, "docs/security.md", "Rows are untrusted input")
	routing := strings.Join(strings.Fields(docSection(t, "docs/sinks.md", "Routing")), " ")
	seen := map[string]bool{}
	for i, k := range sinkKinds {
		t.Run(k.name, func(t *testing.T) {
			// Its name and prefix are its own.
			if !regexp.MustCompile(`^[a-z][a-z0-9]*$`).MatchString(k.name) || seen[k.name] {
				t.Errorf("name %q: want a lower-case word no other sink has", k.name)
			}
			seen[k.name] = true
			if !regexp.MustCompile(`^[A-Z][A-Z0-9]*_$`).MatchString(k.prefix) || k.prefix == "RELAY_" || k.prefix == "LOG_" || k.prefix == "DATABASE_" {
				t.Errorf("prefix %q: want an upper-case word and _, not the relay's own", k.prefix)
			}
			for j, other := range sinkKinds {
				if j != i && (strings.HasPrefix(other.prefix, k.prefix) || strings.HasPrefix(k.prefix, other.prefix)) {
					t.Errorf("prefix %s overlaps the %s sink's %s", k.prefix, other.name, other.prefix)
				}
			}

			// Its file declares its variables, each with its prefix; no
			// other variable has it.
			typ := reflect.TypeOf(k.env())
			if typ.Kind() != reflect.Pointer || typ.Elem().Kind() != reflect.Struct {
				t.Fatalf("env returns %s, want a pointer to a struct", typ)
			}
			file := "internal/cli/sink_" + k.name + ".go"
			if !declaresType(t, file, typ.Elem().Name()) {
				t.Errorf("%s does not declare %s, the sink's variables", file, typ.Elem().Name())
			}
			var own []configVar
			for _, f := range fields {
				switch {
				case f.sink == i:
					own = append(own, f)
					if !strings.HasPrefix(f.name, k.prefix) {
						t.Errorf("%s lacks the sink's prefix %s", f.name, k.prefix)
					}
				case strings.HasPrefix(f.name, k.prefix):
					t.Errorf("%s has the %s sink's prefix but is not one of its variables", f.name, k.name)
				}
			}
			ownVar := func(name string) (configVar, bool) {
				at := slices.IndexFunc(own, func(f configVar) bool { return f.name == name })
				if at < 0 {
					return configVar{}, false
				}
				return own[at], true
			}
			if f, ok := ownVar(k.enabledBy); !ok || f.field.Type.Kind() != reflect.String {
				t.Errorf("enabledBy %q: want one of the sink's variables, a string", k.enabledBy)
			}
			timeout, ok := ownVar(k.timeout)
			if !ok || timeout.field.Type != reflect.TypeFor[time.Duration]() {
				t.Fatalf("timeout %q: want one of the sink's variables, a duration", k.timeout)
			}
			if !strings.Contains(timeout.allowed(), "60% of RELAY_LEASE") {
				t.Errorf("%s's allowed tag %q does not say it is at most 60%% of RELAY_LEASE", k.timeout, timeout.allowed())
			}

			// settingsBase enables it, so that its variables reach the
			// settings, and each has a sample value.
			if !base.sinkEnabled(i) {
				t.Errorf("settingsBase (settings_test.go) does not enable the sink: set %s", k.enabledBy)
			}
			for _, f := range own {
				if _, ok := sampleValues[f.name]; !ok {
					t.Errorf("%s has no sample value in sampleValues (settings_test.go)", f.name)
				}
			}

			// RELAY_LEASE covers its timeout: deliveryTimeout is the
			// variable, and a timeout over 60% of the lease is refused.
			if got, want := base.sinks[i].deliveryTimeout(), timeout.value(&base).Interface(); got != want {
				t.Errorf("deliveryTimeout() = %s with settingsBase, want %s's value %s", got, k.timeout, want)
			}
			_, err := loadConfig(withSamples(samples, append(slices.Clone(settingsBase), "RELAY_LEASE=30s", k.timeout+"=25s")))
			var cfgErr *configError
			if !errors.As(err, &cfgErr) || cfgErr.Var != "RELAY_LEASE" || !strings.Contains(err.Error(), "5/3 of "+k.timeout+"=25s") {
				t.Errorf("RELAY_LEASE=30s with %s=25s: %v; want RELAY_LEASE refused, naming %s", k.timeout, err, k.timeout)
			}

			// Its package runs the conformance and hostile-row suites.
			for _, call := range []string{"Run", "RunHostile", "FuzzHostile"} {
				if !callsSinktest(t, "sinks/"+k.name, call) {
					t.Errorf("sinks/%s's tests do not call sinktest.%s", k.name, call)
				}
			}

			// The binary runs the hostile rows through it.
			if !slices.ContainsFunc(hostileSinks, func(s hostileSink) bool { return s.name == k.name }) {
				t.Errorf("hostileSinks (hostile_rows_process_test.go) has no entry %q", k.name)
			}

			// docs/security.md's bounds on a row's parts give its limits,
			// naming one of its variables.
			if !strings.Contains(untrusted, "`"+k.prefix) {
				t.Errorf("docs/security.md, Rows are untrusted input, names no variable of the %s sink (%s…): say what it bounds", k.name, k.prefix)
			}

			// docs/sinks.md routes to it and has its section, which names
			// every variable and start-up problem.
			if want := "`" + k.name + "` (enabled by `" + k.enabledBy + "`)"; !strings.Contains(routing, want) {
				t.Errorf("docs/sinks.md, Routing, does not say %s", want)
			}
			var body string
			for _, s := range strings.Split(sinksPage, "\n## ")[1:] {
				_, text, _ := strings.Cut(s, "\n")
				text = strings.TrimSpace(text)
				if strings.HasPrefix(text, "`"+k.enabledBy+"`") && strings.Contains(strings.Join(strings.Fields(text), " "), "enables the `"+k.name+"` sink") {
					body = text
				}
			}
			if body == "" {
				t.Fatalf("docs/sinks.md has no section opening with \"`%s` … enables the `%s` sink\"", k.enabledBy, k.name)
			}
			for _, f := range own {
				if !regexp.MustCompile(`\b` + f.name + `\b`).MatchString(body) {
					t.Errorf("docs/sinks.md's %s section does not name %s", k.name, f.name)
				}
			}
			for _, p := range k.problems {
				if !strings.Contains(body, p) {
					t.Errorf("docs/sinks.md's %s section does not name its start-up problem %s", k.name, p)
				}
			}
		})
	}

	// docs/operations.md lists every start-up problem, as the metric's
	// help does.
	if want := "(" + sinkProblems(func(code string) string { return "`" + code + "`" }) + ")"; !strings.Contains(readDoc(t, operationsPage), want) {
		t.Errorf("%s's row of sink_problem does not list the sinks' start-up problems %s", operationsPage, want)
	}
}

// TestSinkKinds_ListsAreMadeFromThem: what names the sinks in the
// configuration's reference, its messages and the metrics' help is made
// from sinkKinds.
func TestSinkKinds_ListsAreMadeFromThem(t *testing.T) {
	t.Parallel()
	lease := configField("RELAY_LEASE").allowed()
	for _, k := range sinkKinds {
		if !strings.Contains(lease, k.timeout) {
			t.Errorf("RELAY_LEASE's allowed %q does not name %s", lease, k.timeout)
		}
		if !slices.Contains(knownPrefixes(), k.prefix) {
			t.Errorf("knownPrefixes() lacks %s", k.prefix)
		}
		if !envName.MatchString(k.enabledBy) {
			t.Errorf("the docs' pattern of variable names does not match %s", k.enabledBy)
		}
		for _, p := range k.problems {
			if !strings.Contains(sinkProblemHelp(), p) {
				t.Errorf("outbox_relay_sink_problem's help does not name %s's problem %s", k.name, p)
			}
		}
	}
	if _, err := loadConfig([]string{"NATS_URL=nats://127.0.0.1:4222", "RELAY_SINK=x"}); err == nil || !strings.Contains(err.Error(), "known: "+strings.Join(knownSinks(), ", ")) {
		t.Errorf("RELAY_SINK=x: %v; want the known sinks named", err)
	}
	none, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := none.requireSinks(nil); err == nil || !strings.Contains(err.Error(), "set "+orList(sinkEnablers())) {
		t.Errorf("no sink: %v; want every enabling variable named", err)
	}
	for _, v := range envReference() {
		if m := regexp.MustCompile(`\{[a-z ]+\}`).FindString(v.Doc + v.Allowed); m != "" {
			t.Errorf("%s's reference keeps %s unexpanded (expandTag)", v.Name, m)
		}
	}
}

// docSection returns the text of the ## section of page headed title.
func docSection(t *testing.T, page, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readDoc(t, page), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("%s has no section ## %s", page, title)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// declaresType reports whether the Go file declares the type name.
func declaresType(t *testing.T, file, name string) bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), repoFile(file), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Error(err)
		return false
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == name {
			found = true
		}
		return !found
	})
	return found
}

// callsSinktest reports whether a test file of dir calls sinktest.<name>.
func callsSinktest(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(repoFile(dir + "/*_test.go"))
	if err != nil || len(files) == 0 {
		t.Errorf("%s: no test files (%v)", dir, err)
		return false
	}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Error(err)
			continue
		}
		found := false
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == name {
					if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "sinktest" {
						found = true
					}
				}
			}
			return !found
		})
		if found {
			return true
		}
	}
	return false
}
