package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"
)

// The alert pack under deploy/ is checked against the metrics the binary
// serves: renaming a metric or a label breaks these tests, not the on-call's
// alerts. docs/alerts.md's alert table is generated from the rules file.

const (
	rulesFile     = "deploy/prometheus/outbox-relay-rules.yml"
	rulesTestFile = "deploy/prometheus/outbox-relay-rules.test.yml"
	dashboardFile = "deploy/grafana/outbox-relay-dashboard.json"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(repoFile(rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return rules
}

type dashboard struct {
	Inputs     []dashboardInput `json:"__inputs"`
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []dashboardVariable `json:"list"`
	} `json:"templating"`
}

// dashboardInput is what Grafana asks for when the dashboard is imported.
type dashboardInput struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	PluginID string `json:"pluginId"`
}

type dashboardVariable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

type dashboardPanel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource *datasourceRef    `json:"datasource"`
	Targets    []dashboardTarget `json:"targets"`
	Panels     []dashboardPanel  `json:"panels"`
}

type dashboardTarget struct {
	Datasource *datasourceRef `json:"datasource"`
	Expr       string         `json:"expr"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(repoFile(dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// panels returns the dashboard's panels, those in collapsed rows included.
func (d dashboard) panels() []dashboardPanel {
	var all []dashboardPanel
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return all
}

// recordingRegisterer registers on a registry and remembers the collectors.
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// registerMetrics registers what /metrics serves for one outbox: the
// process's collectors and one relay's.
func registerMetrics(reg prometheus.Registerer) (*relay.Metrics, *prometheus.GaugeVec, error) {
	problems, err := registerProcessMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	m := relay.NewMetrics()
	if err := m.Register(reg); err != nil {
		return nil, nil, err
	}
	return m, problems, nil
}

// servedSeries returns the series names /metrics serves, as PromQL sees them
// (a histogram's _bucket, _count and _sum), each with its label names. The
// registry is built by registerMetrics, as the run command builds it; every
// vector gets one child so that it shows in the output.
func servedSeries(t *testing.T) map[string][]string {
	t.Helper()
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	if _, _, err := registerMetrics(reg); err != nil {
		t.Fatal(err)
	}
	for _, c := range reg.collectors {
		touchVector(t, c)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string][]string{}
	for _, f := range families {
		var labels []string
		if ms := f.GetMetric(); len(ms) > 0 {
			for _, l := range ms[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			series[name+"_bucket"] = append(slices.Clone(labels), "le")
			series[name+"_count"] = labels
			series[name+"_sum"] = labels
		case dto.MetricType_SUMMARY:
			series[name] = append(slices.Clone(labels), "quantile")
			series[name+"_count"] = labels
			series[name+"_sum"] = labels
		default:
			series[name] = labels
		}
	}
	return series
}

// touchVector creates one child of a metric vector (a *CounterVec,
// *GaugeVec, *HistogramVec, …), whatever its number of labels; other
// collectors are left alone.
func touchVector(t *testing.T, c prometheus.Collector) {
	t.Helper()
	get := reflect.ValueOf(c).MethodByName("GetMetricWithLabelValues")
	if !get.IsValid() {
		return
	}
	for n := 0; n <= 10; n++ {
		values := make([]string, n)
		for i := range values {
			values[i] = "x"
		}
		out := get.CallSlice([]reflect.Value{reflect.ValueOf(values)})
		if err, _ := out[len(out)-1].Interface().(error); err == nil {
			return
		}
	}
	t.Fatalf("%T: found no number of label values it accepts", c)
}

var (
	seriesName = regexp.MustCompile(`\boutbox_relay_[A-Za-z0-9_]+`)
	// selector matches outbox_relay_x{a="…", b=~"…"} with its matchers.
	selector = regexp.MustCompile(`\b(outbox_relay_[A-Za-z0-9_]+)\s*\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)`)
	// targetLabels are added by Prometheus to every scraped series.
	targetLabels = []string{"job", "instance"}
	// outboxLabels are added by a relay serving several outboxes to every
	// series of each outbox's relay (package fleet).
	outboxLabels = []string{"tenant", "schema"}
)

// checkSeries reports every outbox_relay_ series name in text that /metrics
// does not serve, and every label matcher on a label it does not have.
func checkSeries(t *testing.T, file, text string, served map[string][]string) {
	t.Helper()
	reported := map[string]bool{}
	report := func(format string, args ...any) {
		t.Helper()
		if msg := fmt.Sprintf(format, args...); !reported[msg] {
			reported[msg] = true
			t.Error(msg)
		}
	}
	for _, name := range seriesName.FindAllString(text, -1) {
		if _, ok := served[name]; !ok {
			report("%s uses %s, which outbox-relay does not serve", file, name)
		}
	}
	for _, m := range selector.FindAllStringSubmatch(text, -1) {
		labels, ok := served[m[1]]
		if !ok {
			continue
		}
		for _, part := range strings.Split(m[2], ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			lm := matcher.FindStringSubmatch(part)
			if lm == nil {
				report("%s: cannot read the matcher %q of %s", file, part, m[1])
				continue
			}
			if !slices.Contains(labels, lm[1]) && !slices.Contains(targetLabels, lm[1]) && !slices.Contains(outboxLabels, lm[1]) {
				report("%s: %s has no label %s (it has %v)", file, m[1], lm[1], labels)
			}
		}
	}
}

func TestDeploy_MetricNamesExist(t *testing.T) {
	served := servedSeries(t)
	var buckets, labelled int
	for name, labels := range served {
		if strings.HasSuffix(name, "_bucket") && slices.Contains(labels, "le") {
			buckets++
		}
		if strings.HasPrefix(name, "outbox_relay_") && len(labels) > 0 && !slices.Contains(labels, "le") {
			labelled++
		}
	}
	if buckets == 0 || labelled == 0 {
		t.Fatalf("servedSeries found no histogram buckets or no labelled vectors: it is broken (got %v)", served)
	}
	for _, r := range loadRules(t) {
		checkSeries(t, rulesFile+" "+r.Alert+r.Record, r.Expr, served)
	}
	tests, err := os.ReadFile(repoFile(rulesTestFile))
	if err != nil {
		t.Fatal(err)
	}
	checkSeries(t, rulesTestFile, string(tests), served)
	for _, p := range loadDashboard(t).panels() {
		for _, target := range p.Targets {
			checkSeries(t, dashboardFile+" panel "+p.Title, target.Expr, served)
		}
	}
}

func TestDeploy_AlertRulesAnnotated(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s is defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
		}
		if r.Annotations["summary"] == "" {
			t.Errorf("alert %s has no summary", r.Alert)
		}
		if d := r.Annotations["description"]; !strings.Contains(d, "`outbox-relay ") {
			t.Errorf("alert %s: the description does not tell the on-call which outbox-relay command to run: %q", r.Alert, d)
		}
	}
	for _, want := range []string{
		"OutboxRelayFallingBehind", "OutboxRelayDeadLetters", "OutboxRelaySinkDown", "OutboxRelayRetryStorm",
		"OutboxRelaySlowClaims", "OutboxRelayClaimsFailing", "OutboxRelayLeaseRescues", "OutboxRelayTableBloat",
		"OutboxRelaySinkSetupProblem", "OutboxRelaySnapshotPinned", "OutboxRelayAbsent",
	} {
		if !seen[want] {
			t.Errorf("%s has no alert %s", rulesFile, want)
		}
	}
}

func TestDeploy_GrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	const ds = "${DS_PROMETHEUS}"
	if !slices.Contains(d.Inputs, dashboardInput{Name: "DS_PROMETHEUS", Type: "datasource", PluginID: "prometheus"}) {
		t.Errorf("%s: no __inputs entry DS_PROMETHEUS (a Prometheus data source) for Grafana's import", dashboardFile)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v dashboardVariable) bool {
		return v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Errorf("%s: no data source variable DS_PROMETHEUS, needed when the file is provisioned rather than imported", dashboardFile)
	}
	var exprs []string
	for _, p := range d.panels() {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != ds {
			t.Errorf("panel %q: data source %+v, want uid %s", p.Title, p.Datasource, ds)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			if target.Datasource == nil || target.Datasource.UID != ds {
				t.Errorf("panel %q: a query's data source is %+v, want uid %s", p.Title, target.Datasource, ds)
			}
			exprs = append(exprs, target.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"outbox_relay_messages_total", "outbox_relay_delivery_latency_seconds_bucket", "outbox_relay_backlog",
		"outbox_relay_oldest_due_age_seconds", "outbox_relay_in_flight", "outbox_relay_sink_available",
		"outbox_relay_claim_duration_seconds_bucket", "outbox_relay_dead_letters", "outbox_relay_hot_table_dead_tuples",
	} {
		if !regexp.MustCompile(`\b` + want + `\b`).MatchString(all) {
			t.Errorf("%s has no panel on %s", dashboardFile, want)
		}
	}
}

// promtool returns promtool's path, failing the test when it is missing.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not on PATH (%v): install Debian's prometheus package (apt-get install --no-install-recommends prometheus, as .ci/run does) or Prometheus's release archive; the alerting rules are checked with it", err)
	}
	return path
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestDeploy_PromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
}

func TestDeploy_PromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", rulesTestFile)
}

// TestDeploy_DashboardQueriesParse has promtool parse the dashboard's
// queries, as recording rules with Grafana's variables filled in.
func TestDeploy_DashboardQueriesParse(t *testing.T) {
	path := promtool(t)
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", ".*")
	type recording struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var recs []recording
	for _, p := range loadDashboard(t).panels() {
		for i, target := range p.Targets {
			recs = append(recs, recording{Record: fmt.Sprintf("outbox_relay_dashboard:panel%d_%d", p.ID, i), Expr: vars.Replace(target.Expr)})
		}
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(path, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, data)
	}
}

// alertsTable renders the alerting rules as docs/alerts.md shows them.
func alertsTable(rules []rule) string {
	cell := strings.NewReplacer("|", `\|`, "\n", " ")
	oneLine := func(s string) string {
		s = strings.Join(strings.Fields(s), " ")
		return strings.NewReplacer("( ", "(", " )", ")").Replace(s)
	}
	var b strings.Builder
	b.WriteString("| alert | severity | expression (PromQL) | for | what it means, what to run |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		forDuration := "at once"
		if r.For != "" {
			forDuration = r.For
		}
		b.WriteString("| " + r.Alert + " | " + r.Labels["severity"] + " | `" + cell.Replace(oneLine(r.Expr)) + "` | " +
			forDuration + " | " + cell.Replace(oneLine(r.Annotations["description"])) + " |\n")
	}
	return b.String()
}

func TestDocs_AlertsTable(t *testing.T) {
	checkGenerated(t, alertsPage, "<!-- alerts:begin", "<!-- alerts:end -->", alertsTable(loadRules(t)),
		"the alert table is out of step with "+rulesFile,
		"go test ./internal/cli -run TestDocs_AlertsTable -update to regenerate it")
}
