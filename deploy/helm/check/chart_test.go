// Package check lints and renders the Helm chart deploy/helm/outbox-relay
// with Helm's own packages (the chart loader, the lint rules and the template
// engine of the helm CLI), decodes every rendered object strictly into the
// Kubernetes and Prometheus Operator API types (an unknown field fails), and
// checks what users rely on: the security context, the probes, secrets read
// through the relay's *_FILE variables, the alert pack and the dashboard
// shipped as they are in deploy/. It also checks the native-sidecar example,
// deploy/kubernetes/native-sidecar.yaml.
//
// It is a module of its own so that the product's go.mod holds no Helm or
// Kubernetes dependency; .ci/helm (make helm) runs it. Nothing here skips.
package check

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// Paths from this package's directory.
const (
	repoRoot      = "../../.."
	chartDir      = "../outbox-relay"
	rulesFile     = repoRoot + "/deploy/prometheus/outbox-relay-rules.yml"
	dashboardFile = repoRoot + "/deploy/grafana/outbox-relay-dashboard.json"
	sidecarFile   = repoRoot + "/deploy/kubernetes/native-sidecar.yaml"
	releaseName   = "orders"
	namespace     = "shop"
)

// renderDir, when set, receives each combination's rendered manifests, for
// reading: go test -run TestTemplate -render /tmp/chart.
var renderDir = flag.String("render", "", "write each combination's manifests to this directory")

// combo is one set of values the chart is rendered with, as a user would
// pass them with -f.
type combo struct {
	name   string
	values string
	// kinds lists the objects it must render, as Kind/name.
	kinds []string
}

var combos = []combo{
	{
		name:   "defaults",
		values: ``,
		kinds:  []string{"Deployment/orders-outbox-relay", "Service/orders-outbox-relay", "ServiceAccount/orders-outbox-relay"},
	},
	{
		name: "replicas 3, PDB, ServiceMonitor, PrometheusRule, dashboard, secrets",
		values: `
replicaCount: 3
image: {repository: registry.example.com/outbox-relay, tag: v0.1.0}
env:
  NATS_SUBJECT_PREFIX: events.
  RELAY_BATCH_SIZE: 500
  RELAY_NOTIFY: true
secret:
  name: outbox-relay
  keys:
    DATABASE_URL: database-url
    NATS_URL: nats-url
serviceMonitor: {enabled: true, labels: {release: kube-prometheus-stack}}
prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}}
grafanaDashboard: {enabled: true, annotations: {grafana_folder: Outbox}}
`,
		kinds: []string{
			"ConfigMap/orders-outbox-relay-dashboard", "Deployment/orders-outbox-relay", "PodDisruptionBudget/orders-outbox-relay",
			"PrometheusRule/orders-outbox-relay", "Service/orders-outbox-relay", "ServiceAccount/orders-outbox-relay",
			"ServiceMonitor/orders-outbox-relay",
		},
	},
	{
		name: "every secret from an existing Secret, NATS creds and TLS files mounted",
		values: `
secret:
  name: relay-secrets
  mountPath: /run/secrets/relay
  keys:
    DATABASE_URL: db
    NATS_URL: nats
    WEBHOOK_URL: webhook-url
    WEBHOOK_SECRET: webhook-secret
    KAFKA_SASL_PASSWORD: kafka-password
    RABBITMQ_URL: amqp
env:
  RELAY_SINK: nats
  NATS_CREDS_FILE: /etc/outbox-relay/nats/user.creds
  KAFKA_BROKERS: kafka-0.kafka:9092
  KAFKA_SASL_MECHANISM: SCRAM-SHA-512
  KAFKA_SASL_USERNAME: relay
  KAFKA_TLS: true
extraVolumes:
  - name: nats-creds
    secret: {secretName: nats-creds, defaultMode: 0440}
extraVolumeMounts:
  - {name: nats-creds, mountPath: /etc/outbox-relay/nats, readOnly: true}
serviceAccount: {create: false}
`,
		kinds: []string{"Deployment/orders-outbox-relay", "Service/orders-outbox-relay"},
	},
	{
		name: "partitioned mode, 4 relays, own port, longer drain, Recreate",
		values: `
replicaCount: 4
fullnameOverride: relay
drainTimeoutSeconds: 45
strategy: {type: Recreate}
env:
  RELAY_MODE: partitioned
  RELAY_HTTP_ADDR: ":9464"
  RELAY_LEASE: 20s
  RELAY_MIGRATE: false
extraEnv:
  - name: RELAY_ID
    valueFrom: {fieldRef: {fieldPath: metadata.name}}
envFrom:
  - secretRef: {name: relay-env}
podDisruptionBudget: {minAvailable: 3}
serviceMonitor: {enabled: true, interval: 15s, scrapeTimeout: 10s}
resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {memory: 512Mi}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector: {matchLabels: {app.kubernetes.io/name: outbox-relay}}
`,
		kinds: []string{"Deployment/relay", "PodDisruptionBudget/relay", "Service/relay", "ServiceAccount/relay", "ServiceMonitor/relay"},
	},
	{
		name: "one replica with a PDB asked for",
		values: `
replicaCount: 1
podDisruptionBudget: {enabled: true}
`,
		kinds: []string{"Deployment/orders-outbox-relay", "PodDisruptionBudget/orders-outbox-relay", "Service/orders-outbox-relay", "ServiceAccount/orders-outbox-relay"},
	},
	{
		name: "two replicas with the PDB turned off",
		values: `
replicaCount: 2
podDisruptionBudget: {enabled: false}
`,
		kinds: []string{"Deployment/orders-outbox-relay", "Service/orders-outbox-relay", "ServiceAccount/orders-outbox-relay"},
	},
	{
		name: "NetworkPolicy for Prometheus in its namespace and a CIDR, LoadBalancer, own port",
		values: `
env: {RELAY_HTTP_ADDR: ":9464"}
service: {type: LoadBalancer}
networkPolicy:
  enabled: true
  prometheusNamespaceLabels: {kubernetes.io/metadata.name: monitoring}
  prometheusPodLabels: {app.kubernetes.io/name: prometheus}
  extraFrom:
    - ipBlock: {cidr: 10.20.0.0/16}
`,
		kinds: []string{"Deployment/orders-outbox-relay", "NetworkPolicy/orders-outbox-relay", "Service/orders-outbox-relay", "ServiceAccount/orders-outbox-relay"},
	},
	{
		name: "NetworkPolicy for Prometheus pods of the release's namespace, NodePort",
		values: `
service: {type: NodePort}
networkPolicy: {enabled: true, prometheusPodLabels: {app: prometheus}}
`,
		kinds: []string{"Deployment/orders-outbox-relay", "NetworkPolicy/orders-outbox-relay", "Service/orders-outbox-relay", "ServiceAccount/orders-outbox-relay"},
	},
	{
		name: "NetworkPolicy without a peer",
		values: `
networkPolicy: {enabled: true}
`,
		kinds: []string{"Deployment/orders-outbox-relay", "NetworkPolicy/orders-outbox-relay", "Service/orders-outbox-relay", "ServiceAccount/orders-outbox-relay"},
	},
}

// refused lists values the chart must refuse, with a part of the error.
var refused = []struct {
	name, values, want string
}{
	{"a variable without a _FILE twin in secret.keys", "secret: {name: s, keys: {NATS_CREDS: creds}}", "value must be one of 'DATABASE_URL'"},
	{"secret.keys without secret.name", "secret: {keys: {DATABASE_URL: db}}", "secret.name is empty"},
	{"a secret also in env", "secret: {name: s, keys: {DATABASE_URL: db}}\nenv: {DATABASE_URL: postgres://x}", "DATABASE_URL is set both"},
	{"a secret also in extraEnv", "secret: {name: s, keys: {NATS_URL: nats-url}}\nextraEnv: [{name: NATS_URL, value: nats://x}]", "NATS_URL is set both"},
	{"RELAY_DRAIN_TIMEOUT in env", "env: {RELAY_DRAIN_TIMEOUT: 30s}", "drainTimeoutSeconds"},
	{"a _FILE variable the chart sets", "secret: {name: s, keys: {DATABASE_URL: db}}\nenv: {DATABASE_URL_FILE: /x}", "set by the chart"},
	{"the endpoint on loopback", `env: {RELAY_HTTP_ADDR: "127.0.0.1:8461"}`, "all of the pod's addresses"},
	{"the endpoint disabled", `env: {RELAY_HTTP_ADDR: ""}`, "all of the pod's addresses"},
	{"an unknown value", "replicas: 3", "replicas"},
	{"a grace period too short to settle", "terminationGraceExtraSeconds: 2", "terminationGraceExtraSeconds"},
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	return ch
}

func parseValues(t *testing.T, values string) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	return vals
}

// render renders ch with values as `helm template` does (schema validation
// included) and returns the manifests by template file, NOTES.txt apart.
func render(ch *chart.Chart, values map[string]any) (map[string]string, string, error) {
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValues(ch, values, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, "", err
	}
	out, err := engine.Render(ch, top)
	if err != nil {
		return nil, "", err
	}
	var notes string
	for name, text := range out {
		if strings.HasSuffix(name, "NOTES.txt") {
			notes = text
			delete(out, name)
		}
	}
	return out, notes, nil
}

// object is one rendered document, decoded strictly into its API type.
type object struct {
	file string
	kind string
	name string
	raw  []byte
	obj  any
}

// apiTypes maps apiVersion and kind to a new value of the Go type it
// decodes into. A kind not listed here fails the check.
var apiTypes = map[string]func() any{
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"v1/ServiceAccount":                       func() any { return new(corev1.ServiceAccount) },
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return new(networkingv1.NetworkPolicy) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return new(monitoringv1.PrometheusRule) },
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// decode splits the rendered files into documents and decodes each strictly
// (sigs.k8s.io/yaml: unknown and duplicate fields are errors) into its type.
func decode(t *testing.T, files map[string]string) []object {
	t.Helper()
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var objs []object
	for _, file := range names {
		for _, doc := range docSeparator.Split(files[file], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", file, err, doc)
			}
			newType, ok := apiTypes[meta.APIVersion+"/"+meta.Kind]
			if !ok {
				t.Fatalf("%s: %s %s: no API type to check it against", file, meta.APIVersion, meta.Kind)
			}
			obj := newType()
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s/%s does not decode strictly into %T: %v\n%s", file, meta.Kind, meta.Metadata.Name, obj, err, doc)
			}
			if meta.Metadata.Name == "" {
				t.Errorf("%s: %s without a name", file, meta.Kind)
			}
			objs = append(objs, object{file: file, kind: meta.Kind, name: meta.Metadata.Name, raw: []byte(doc), obj: obj})
		}
	}
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func kindNames(objs []object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.kind+"/"+o.name)
	}
	sort.Strings(out)
	return out
}

func find[T any](objs []object) []*T {
	var out []*T
	for _, o := range objs {
		if v, ok := o.obj.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestLint runs Helm's lint rules (helm lint --strict: warnings fail too)
// with every combination of values.
func TestLint(t *testing.T) {
	for _, c := range combos {
		t.Run(c.name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(chartDir, parseValues(t, c.values), namespace, nil)
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestTemplate renders every combination, decodes every object strictly and
// checks what users rely on.
func TestTemplate(t *testing.T) {
	ch := loadChart(t)
	fileVars := secretVariables(t)
	known := knownVariables(t)
	for _, c := range combos {
		t.Run(c.name, func(t *testing.T) {
			values := parseValues(t, c.values)
			files, notes, err := render(ch, values)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			if *renderDir != "" {
				writeRendered(t, c.name, files, notes)
			}
			if !strings.Contains(notes, "/outbox-relay status") {
				t.Errorf("NOTES.txt does not render as expected:\n%s", notes)
			}
			checkNotes(t, notes, values)
			objs := decode(t, files)
			if got := kindNames(objs); !slices.Equal(got, c.kinds) {
				t.Errorf("rendered %q, want %q", got, c.kinds)
			}
			coalesced, err := chartutil.CoalesceValues(ch, values)
			if err != nil {
				t.Fatal(err)
			}
			checkObjects(t, objs, coalesced, fileVars, known)
		})
	}
}

// writeRendered writes one combination's manifests to renderDir, as
// helm template prints them.
func writeRendered(t *testing.T, name string, files map[string]string, notes string) {
	t.Helper()
	var b strings.Builder
	for _, file := range slices.Sorted(maps.Keys(files)) {
		if strings.TrimSpace(files[file]) != "" {
			fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", file, strings.TrimSpace(files[file]))
		}
	}
	fmt.Fprintf(&b, "\n# NOTES.txt\n%s\n", notes)
	slug := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(name), "-"), "-")
	if err := os.MkdirAll(*renderDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*renderDir, slug+".yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTemplate_Refused checks that values the relay would refuse at start,
// or that would break the probes, are refused by helm install already.
func TestTemplate_Refused(t *testing.T) {
	ch := loadChart(t)
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			_, _, err := render(ch, parseValues(t, r.values))
			if err == nil {
				t.Fatalf("values %q rendered; want an error containing %q", r.values, r.want)
			}
			if !strings.Contains(err.Error(), r.want) {
				t.Errorf("error %q does not contain %q", err, r.want)
			}
		})
	}
}

// TestPackage packages the chart as `helm package` does (chartutil.Save),
// loads the archive back and renders it: the copies of the alert pack and
// the dashboard travel in the archive.
func TestPackage(t *testing.T) {
	ch := loadChart(t)
	archive, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatalf("helm package: %v", err)
	}
	if got, want := filepath.Base(archive), "outbox-relay-"+ch.Metadata.Version+".tgz"; got != want {
		t.Errorf("archive %s, want %s", got, want)
	}
	packaged, err := loader.Load(archive)
	if err != nil {
		t.Fatalf("load %s: %v", archive, err)
	}
	for _, f := range packaged.Files {
		if strings.HasPrefix(f.Name, "examples/") || strings.HasSuffix(f.Name, ".go") {
			t.Errorf("the package holds %s", f.Name)
		}
	}
	files, _, err := render(packaged, parseValues(t, combos[1].values))
	if err != nil {
		t.Fatalf("template the package: %v", err)
	}
	objs := decode(t, files)
	if got := kindNames(objs); !slices.Equal(got, combos[1].kinds) {
		t.Errorf("the package renders %q, want %q", got, combos[1].kinds)
	}
	checkRules(t, find[monitoringv1.PrometheusRule](objs)[0])
	checkDashboard(t, find[corev1.ConfigMap](objs)[0])
}

// TestChart_AppVersion checks Chart.yaml's metadata.
func TestChart_AppVersion(t *testing.T) {
	ch := loadChart(t)
	m := ch.Metadata
	if m.APIVersion != chart.APIVersionV2 || m.Name != "outbox-relay" || m.Version == "" || m.AppVersion == "" {
		t.Errorf("Chart.yaml: apiVersion %q, name %q, version %q, appVersion %q", m.APIVersion, m.Name, m.Version, m.AppVersion)
	}
	// helm template checks kubeVersion against the version it assumes
	// without a cluster, v1.20.0 in a helm built by go install or go run:
	// any constraint fails there. The chart needs Kubernetes 1.21 (policy/v1).
	if m.KubeVersion != "" {
		t.Errorf("Chart.yaml: kubeVersion %q: helm template without a cluster would refuse the chart", m.KubeVersion)
	}
	if strings.HasPrefix(m.AppVersion, "v") {
		t.Errorf("appVersion %q: the image tag is the version without its v", m.AppVersion)
	}
}

// TestSchema_FileVariables checks that values.schema.json and the chart's
// helper accept exactly the relay's secret variables, those with a _FILE
// twin (internal/cli: the fields with a redact tag).
func TestSchema_FileVariables(t *testing.T) {
	want := secretVariables(t)
	var schema struct {
		Properties struct {
			Secret struct {
				Properties struct {
					Keys struct {
						PropertyNames struct {
							Enum []string `json:"enum"`
						} `json:"propertyNames"`
					} `json:"keys"`
				} `json:"properties"`
			} `json:"secret"`
		} `json:"properties"`
	}
	b, err := os.ReadFile(chartDir + "/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(slices.Values(schema.Properties.Secret.Properties.Keys.PropertyNames.Enum))
	if !slices.Equal(got, want) {
		t.Errorf("values.schema.json secret.keys accepts %q; the relay reads %q from files", got, want)
	}
	helpers, err := os.ReadFile(chartDir + "/templates/_helpers.tpl")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)define "outbox-relay.fileVariables" -}}\s*(.*?)\s*\{\{- end`).FindSubmatch(helpers)
	if m == nil {
		t.Fatal(`_helpers.tpl has no "outbox-relay.fileVariables"`)
	}
	got = slices.Sorted(slices.Values(strings.Fields(string(m[1]))))
	if !slices.Equal(got, want) {
		t.Errorf(`_helpers.tpl "outbox-relay.fileVariables" lists %q; the relay reads %q from files`, got, want)
	}
}

// TestValues_Documented checks that every value in values.yaml has a
// comment and a place in values.schema.json.
func TestValues_Documented(t *testing.T) {
	b, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	key := regexp.MustCompile(`^( {0,2})([A-Za-z][A-Za-z0-9]*):`)
	// Values that are Kubernetes objects: their fields are Kubernetes's.
	objects := []string{"resources", "podSecurityContext", "securityContext", "strategy"}
	var parent string
	for i, line := range lines {
		m := key.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[1] == "" {
			parent = m[2]
		} else if slices.Contains(objects, parent) {
			continue
		}
		commented := i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#")
		if !commented && !strings.Contains(line, "#") {
			t.Errorf("values.yaml:%d: %s has no comment", i+1, strings.TrimSpace(line))
		}
	}
}

// checkObjects checks the properties users rely on in one rendering.
func checkObjects(t *testing.T, objs []object, values chartutil.Values, fileVars, known []string) {
	t.Helper()
	deployments := find[appsv1.Deployment](objs)
	if len(deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deployments))
	}
	d := deployments[0]
	pod := d.Spec.Template.Spec
	selector := d.Spec.Selector.MatchLabels
	if !matches(selector, d.Spec.Template.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", selector, d.Spec.Template.Labels)
	}
	for _, o := range objs {
		labels := objectLabels(t, o)
		for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"} {
			if labels[l] == "" {
				t.Errorf("%s/%s has no label %s", o.kind, o.name, l)
			}
		}
	}

	if replicas := values["replicaCount"]; d.Spec.Replicas == nil || fmt.Sprint(*d.Spec.Replicas) != fmt.Sprint(replicas) {
		t.Errorf("replicas %v, want replicaCount %v", d.Spec.Replicas, replicas)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token")
	}
	for _, sa := range find[corev1.ServiceAccount](objs) {
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Error("the ServiceAccount lets pods mount its token")
		}
		if sa.Name != pod.ServiceAccountName {
			t.Errorf("ServiceAccount %s, the pod runs as %s", sa.Name, pod.ServiceAccountName)
		}
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the relay alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	checkContainerSecurity(t, c)
	tag, _ := values["image"].(map[string]any)["tag"].(string)
	if tag == "" {
		tag = "0.1.0"
	}
	if !strings.HasSuffix(c.Image, ":"+tag) {
		t.Errorf("image %s, want the tag %s", c.Image, tag)
	}
	if !slices.Equal(c.Args, []string{"run"}) {
		t.Errorf("args %q, want [run]", c.Args)
	}

	// The endpoint: RELAY_HTTP_ADDR's port, named http, probed on /livez and /readyz.
	wantPort := int32(8461)
	envMap := values["env"].(map[string]any)
	if addr, ok := envMap["RELAY_HTTP_ADDR"]; ok {
		var p int32
		fmt.Sscanf(addr.(string)[strings.LastIndex(addr.(string), ":")+1:], "%d", &p)
		wantPort = p
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != wantPort {
		t.Errorf("ports %+v, want http on %d (RELAY_HTTP_ADDR)", c.Ports, wantPort)
	}
	checkProbe(t, "liveness", c.LivenessProbe, "/livez", "http")
	checkProbe(t, "readiness", c.ReadinessProbe, "/readyz", "http")
	if c.StartupProbe != nil {
		t.Error("a startup probe: /livez answers from the start, and /readyz must not hold the start")
	}

	// The drain and the grace period.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s is set twice", e.Name)
		}
		env[e.Name] = e
		if !slices.Contains(known, e.Name) {
			t.Errorf("%s is not one of the relay's variables (outbox-relay help lists them)", e.Name)
		}
	}
	drain := toInt(values["drainTimeoutSeconds"])
	if got := env["RELAY_DRAIN_TIMEOUT"].Value; got != fmt.Sprintf("%ds", drain) {
		t.Errorf("RELAY_DRAIN_TIMEOUT=%q, want %ds", got, drain)
	}
	grace := pod.TerminationGracePeriodSeconds
	// The relay settles for up to 5 s after the drain (relay.settleGrace),
	// then releases what is left and closes.
	if grace == nil || *grace < int64(drain)+10 {
		t.Errorf("terminationGracePeriodSeconds %v, want at least RELAY_DRAIN_TIMEOUT (%ds) + 10s", grace, drain)
	}

	// Secrets: read from files (*_FILE), mounted read-only from the Secret.
	secret := values["secret"].(map[string]any)
	keys, _ := secret["keys"].(map[string]any)
	mountPath, _ := secret["mountPath"].(string)
	var secretVolume *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret["name"] {
			secretVolume = &pod.Volumes[i]
		}
	}
	for _, v := range fileVars {
		if e, ok := env[v]; ok {
			t.Errorf("the secret %s is in the environment (%+v): want %s_FILE", v, e, v)
		}
	}
	for v, key := range keys {
		if !slices.Contains(fileVars, v) {
			t.Errorf("secret.keys.%s: the relay has no %s_FILE", v, v)
		}
		e, ok := env[v+"_FILE"]
		if !ok {
			t.Errorf("secret.keys.%s: no %s_FILE in the environment", v, v)
			continue
		}
		if e.Value != mountPath+"/"+v {
			t.Errorf("%s_FILE=%q, want %s/%s", v, e.Value, mountPath, v)
		}
		if secretVolume == nil {
			t.Fatalf("no volume of the Secret %v", secret["name"])
		}
		if !slices.Contains(secretVolume.Secret.Items, corev1.KeyToPath{Key: key.(string), Path: v}) {
			t.Errorf("the Secret's key %s is not mounted as %s: %+v", key, v, secretVolume.Secret.Items)
		}
	}
	if secretVolume != nil {
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == secretVolume.Name && m.MountPath == mountPath && m.ReadOnly
		})
		if !mounted {
			t.Errorf("the Secret is not mounted read-only at %s: %+v", mountPath, c.VolumeMounts)
		}
	}
	for name, value := range envMap {
		if e, ok := env[name]; !ok || e.Value != fmt.Sprint(value) {
			t.Errorf("env.%s=%v is rendered as %+v", name, value, env[name])
		}
	}

	// The Service: port "metrics" on the container's "http", selecting the relays.
	services := find[corev1.Service](objs)
	if len(services) != 1 {
		t.Fatalf("%d Services, want 1", len(services))
	}
	svc := services[0]
	if !matches(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("the Service selects %v, not the relays %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
		t.Errorf("Service ports %+v, want metrics -> http", svc.Spec.Ports)
	}

	// The PodDisruptionBudget: when asked for, or with several relays.
	pdbs := find[policyv1.PodDisruptionBudget](objs)
	pdbValues := values["podDisruptionBudget"].(map[string]any)
	wantPDB := pdbValues["enabled"] == true || (pdbValues["enabled"] == nil && toInt(values["replicaCount"]) > 1)
	if (len(pdbs) == 1) != wantPDB {
		t.Errorf("%d PodDisruptionBudgets; want one: %v", len(pdbs), wantPDB)
	}
	for _, pdb := range pdbs {
		if !matches(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("the PDB selects %v, not the relays", pdb.Spec.Selector.MatchLabels)
		}
		if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
			t.Errorf("the PDB sets minAvailable %v and maxUnavailable %v: want one", pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
		}
	}

	checkNetworkPolicy(t, objs, values, d, wantPort)

	for _, sm := range find[monitoringv1.ServiceMonitor](objs) {
		if !matches(sm.Spec.Selector.MatchLabels, svc.Labels) {
			t.Errorf("the ServiceMonitor selects %v, not the Service %v", sm.Spec.Selector.MatchLabels, svc.Labels)
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints %+v, want port metrics, path /metrics", sm.Spec.Endpoints)
		}
		if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
			t.Errorf("ServiceMonitor namespaces %v", sm.Spec.NamespaceSelector.MatchNames)
		}
	}
	for _, pr := range find[monitoringv1.PrometheusRule](objs) {
		checkRules(t, pr)
	}
	for _, cm := range find[corev1.ConfigMap](objs) {
		checkDashboard(t, cm)
	}
}

// checkNotes checks NOTES.txt's warnings: the endpoint, which has no
// authentication, exposed beyond the cluster by the Service's type; a
// NetworkPolicy that lets no one scrape.
func checkNotes(t *testing.T, notes string, values map[string]any) {
	t.Helper()
	typ := "ClusterIP"
	if svc, ok := values["service"].(map[string]any); ok && svc["type"] != nil {
		typ = svc["type"].(string)
	}
	exposed := typ == "LoadBalancer" || typ == "NodePort"
	warned := strings.Contains(notes, "WARNING: service.type is "+typ) && strings.Contains(notes, "no authentication")
	if warned != exposed {
		t.Errorf("service.type %s: NOTES.txt warns of the unauthenticated endpoint: %v, want %v\n%s", typ, warned, exposed, notes)
	}
	np, _ := values["networkPolicy"].(map[string]any)
	noPeer := np != nil && np["enabled"] == true && len(asMap(np["prometheusNamespaceLabels"])) == 0 &&
		len(asMap(np["prometheusPodLabels"])) == 0 && len(asSlice(np["extraFrom"])) == 0
	if got := strings.Contains(notes, "names no peer"); got != noPeer {
		t.Errorf("NOTES.txt warns of a NetworkPolicy without a peer: %v, want %v\n%s", got, noPeer, notes)
	}
}

// checkNetworkPolicy checks the NetworkPolicy, when asked for: it selects
// the relays, restricts their ingress only, and lets in, on the endpoint's
// port alone, exactly the peers the values name (never everyone: a rule
// without peers would admit any source).
func checkNetworkPolicy(t *testing.T, objs []object, values map[string]any, d *appsv1.Deployment, port int32) {
	t.Helper()
	nps := find[networkingv1.NetworkPolicy](objs)
	values = asMap(values["networkPolicy"])
	if want := values["enabled"] == true; (len(nps) == 1) != want {
		t.Fatalf("%d NetworkPolicies; want one: %v", len(nps), want)
	}
	if len(nps) == 0 {
		return
	}
	np := nps[0]
	if !matches(np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) || len(np.Spec.PodSelector.MatchExpressions) > 0 {
		t.Errorf("the NetworkPolicy selects %v, not the relays %v", np.Spec.PodSelector, d.Spec.Template.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Egress) > 0 {
		t.Errorf("the NetworkPolicy's types %v, egress %v: want Ingress only", np.Spec.PolicyTypes, np.Spec.Egress)
	}
	var peers []any
	nsLabels, podLabels := asMap(values["prometheusNamespaceLabels"]), asMap(values["prometheusPodLabels"])
	if len(nsLabels) > 0 || len(podLabels) > 0 {
		peer := map[string]any{}
		if len(nsLabels) > 0 {
			peer["namespaceSelector"] = map[string]any{"matchLabels": nsLabels}
		}
		if len(podLabels) > 0 {
			peer["podSelector"] = map[string]any{"matchLabels": podLabels}
		}
		peers = append(peers, peer)
	}
	peers = append(peers, asSlice(values["extraFrom"])...)
	var want []networkingv1.NetworkPolicyPeer
	if b, err := json.Marshal(peers); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		if np.Spec.Ingress == nil || len(np.Spec.Ingress) != 0 {
			t.Errorf("the NetworkPolicy without peers has ingress %+v, want [] (none)", np.Spec.Ingress)
		}
		return
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("the NetworkPolicy has %d ingress rules, want 1", len(np.Spec.Ingress))
	}
	rule := np.Spec.Ingress[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.IntVal != port || rule.Ports[0].Protocol == nil || *rule.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("the NetworkPolicy's ports %+v, want TCP %d (the endpoint's) alone", rule.Ports, port)
	}
	if len(rule.From) == 0 || !reflect.DeepEqual(rule.From, want) {
		t.Errorf("the NetworkPolicy lets in %+v, want %+v", rule.From, want)
	}
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func checkContainerSecurity(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatalf("container %s has no securityContext", c.Name)
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Errorf("container %s: runAsNonRoot is not true", c.Name)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
	case sc.Privileged != nil && *sc.Privileged:
		t.Errorf("container %s is privileged", c.Name)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("container %s: capabilities %+v, want drop [ALL] and none added", c.Name, sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("container %s: seccompProfile %+v, want RuntimeDefault", c.Name, sc.SeccompProfile)
	case sc.RunAsUser != nil && *sc.RunAsUser == 0:
		t.Errorf("container %s runs as uid 0", c.Name)
	}
}

func checkProbe(t *testing.T, what string, p *corev1.Probe, path, port string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("no HTTP %s probe", what)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != port {
		t.Errorf("%s probe on %s port %s, want %s on port %s", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
	}
}

// checkRules checks that the PrometheusRule's groups are the alert pack's,
// deploy/prometheus/outbox-relay-rules.yml, decoded into the same types.
func checkRules(t *testing.T, pr *monitoringv1.PrometheusRule) {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatalf("%s does not decode strictly into a PrometheusRule's spec: %v", rulesFile, err)
	}
	if len(want.Groups) == 0 || len(want.Groups[0].Rules) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	if !reflect.DeepEqual(pr.Spec, want) {
		got, _ := json.MarshalIndent(pr.Spec, "", "  ")
		exp, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("the PrometheusRule's groups differ from %s:\n%s", rulesFile, firstDifference(string(got), string(exp)))
	}
}

// checkDashboard checks the dashboard ConfigMap: Grafana's sidecar label and
// deploy/grafana/outbox-relay-dashboard.json as it is.
func checkDashboard(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s: label grafana_dashboard=%q, want \"1\" (Grafana's dashboard sidecar)", cm.Name, cm.Labels["grafana_dashboard"])
	}
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("ConfigMap %s holds %d files, want the dashboard", cm.Name, len(cm.Data))
	}
	for name, got := range cm.Data {
		if !strings.HasSuffix(name, ".json") {
			t.Errorf("ConfigMap %s: %s, want a .json file", cm.Name, name)
		}
		if got != strings.TrimSuffix(string(want), "\n") {
			t.Errorf("ConfigMap %s: the dashboard differs from %s:\n%s", cm.Name, dashboardFile, firstDifference(got, string(want)))
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("ConfigMap %s: the dashboard is not JSON", cm.Name)
		}
	}
}

// TestNativeSidecar checks deploy/kubernetes/native-sidecar.yaml, the
// example of the relay beside an application in its own pod: a restartable
// init container (Kubernetes native sidecar) probed on /livez only.
func TestNativeSidecar(t *testing.T) {
	b, err := os.ReadFile(sidecarFile)
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, map[string]string{sidecarFile: string(b)})
	deployments := find[appsv1.Deployment](objs)
	if len(deployments) != 1 {
		t.Fatalf("%s: %d Deployments, want 1", sidecarFile, len(deployments))
	}
	pod := deployments[0].Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the example pod mounts a service account token")
	}
	var relay *corev1.Container
	for i, c := range pod.InitContainers {
		if strings.HasSuffix(c.Image, ":0.1.0") || strings.Contains(c.Image, "outbox-relay") {
			relay = &pod.InitContainers[i]
		}
	}
	if relay == nil {
		t.Fatalf("%s: no outbox-relay init container: %+v", sidecarFile, pod.InitContainers)
	}
	if relay.RestartPolicy == nil || *relay.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("the relay's restartPolicy %v, want Always (a native sidecar)", relay.RestartPolicy)
	}
	checkContainerSecurity(t, *relay)
	if len(relay.Ports) != 1 || relay.Ports[0].Name != "http" || relay.Ports[0].ContainerPort != 8461 {
		t.Errorf("relay ports %+v, want http on 8461", relay.Ports)
	}
	checkProbe(t, "liveness", relay.LivenessProbe, "/livez", "http")
	if relay.ReadinessProbe != nil {
		t.Error("the relay has a readiness probe: /readyz would take the application out of service whenever a broker or the database is down")
	}
	if relay.StartupProbe != nil && relay.StartupProbe.HTTPGet != nil && relay.StartupProbe.HTTPGet.Path != "/livez" {
		t.Errorf("the relay's startup probe is on %s: the application would wait for the brokers", relay.StartupProbe.HTTPGet.Path)
	}
	fileVars := secretVariables(t)
	known := knownVariables(t)
	var haveFile bool
	for _, e := range relay.Env {
		if !slices.Contains(known, e.Name) {
			t.Errorf("%s is not one of the relay's variables", e.Name)
		}
		if slices.Contains(fileVars, e.Name) {
			t.Errorf("the secret %s is in the environment: want %s_FILE", e.Name, e.Name)
		}
		haveFile = haveFile || (strings.HasSuffix(e.Name, "_FILE") && slices.Contains(fileVars, strings.TrimSuffix(e.Name, "_FILE")))
	}
	if !haveFile {
		t.Error("the example reads no secret through a *_FILE variable")
	}
	if len(pod.Containers) == 0 {
		t.Error("the example has no application container")
	}
	for _, c := range pod.Containers {
		if c.Name == relay.Name {
			t.Error("the relay is also a regular container")
		}
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 25 {
		t.Errorf("terminationGracePeriodSeconds %v: want room for the relay's drain (10 s) and settle", pod.TerminationGracePeriodSeconds)
	}
}

// secretVariables returns the relay's variables that have a _FILE twin: the
// fields of internal/cli's configuration with a redact tag.
func secretVariables(t *testing.T) []string {
	t.Helper()
	return configTags(t, regexp.MustCompile(`env:"([A-Z0-9_]+)"[^\x60]*redact:"`))
}

// knownVariables returns every variable the relay reads: the env tags of
// internal/cli's configuration and the _FILE twins of the secret ones.
func knownVariables(t *testing.T) []string {
	t.Helper()
	vars := configTags(t, regexp.MustCompile(`env:"([A-Z0-9_]+)"`))
	for _, v := range secretVariables(t) {
		vars = append(vars, v+"_FILE")
	}
	return vars
}

func configTags(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	paths, err := filepath.Glob(repoRoot + "/internal/cli/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			out = append(out, string(m[1]))
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		t.Fatal("found no variables in internal/cli")
	}
	return out
}

func objectLabels(t *testing.T, o object) map[string]string {
	t.Helper()
	var m struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(o.raw, &m); err != nil {
		t.Fatal(err)
	}
	return m.Metadata.Labels
}

// matches reports whether selector selects labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func toInt(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	return -1
}

// firstDifference shows the lines around the first line where got and want
// differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			var b bytes.Buffer
			fmt.Fprintf(&b, "line %d:\n got: %s\nwant: %s", i+1, gl, wl)
			return b.String()
		}
	}
	return "(no difference line by line)"
}
