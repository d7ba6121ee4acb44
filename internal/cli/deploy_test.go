package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The Dockerfile and docker-compose.yml are configuration too: these tests
// keep them in step with the binary, so that a renamed variable, subcommand
// or port breaks the build instead of the quick start.

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string    `yaml:"image"`
	Build       string    `yaml:"build"`
	Profiles    []string  `yaml:"profiles"`
	Environment yaml.Node `yaml:"environment"`
	Ports       []string  `yaml:"ports"`
	Entrypoint  []string  `yaml:"entrypoint"`
	Command     []string  `yaml:"command"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// env returns the service's environment, written as a map or as a list of
// NAME=value.
func (s composeService) env(t *testing.T) map[string]string {
	t.Helper()
	vars := map[string]string{}
	switch s.Environment.Kind {
	case 0:
	case yaml.MappingNode:
		if err := s.Environment.Decode(&vars); err != nil {
			t.Fatal(err)
		}
	case yaml.SequenceNode:
		var list []string
		if err := s.Environment.Decode(&list); err != nil {
			t.Fatal(err)
		}
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
	default:
		t.Fatalf("environment at line %d is neither a map nor a list", s.Environment.Line)
	}
	return vars
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(repoFile("docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"postgres", "nats", "relay", "producer", "subscriber"} {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %q", name)
		}
	}
	return f
}

func TestCompose_RelayEnvironment(t *testing.T) {
	f := readCompose(t)
	relay := f.Services["relay"]
	vars := relay.env(t)
	if len(vars) == 0 {
		t.Fatal("the relay service sets no environment")
	}

	var known []string
	for _, v := range envReference() {
		known = append(known, v.Name)
	}
	var environ []string
	for name, value := range vars {
		if !slices.Contains(known, name) {
			t.Errorf("the relay service sets %s, which is not a configuration variable (outbox-relay help lists them)", name)
		}
		if strings.Contains(value, "$") {
			t.Errorf("%s=%q: interpolation in the relay's environment is not checked here", name, value)
		}
		environ = append(environ, name+"="+value)
	}

	// The values are valid, and enough to run: a database and a sink.
	c, err := loadConfig(environ)
	if err != nil {
		t.Fatalf("the relay service's environment is refused: %v", err)
	}
	if err := c.requireDatabase(); err != nil {
		t.Error(err)
	}
	if err := c.requireSinks(nil); err != nil {
		t.Error(err)
	}
	if sinkEnvOf[natsEnv](&c).Stream == "" {
		t.Error("the quick start needs NATS_STREAM: nothing else creates a stream")
	}

	if relay.Build != "." {
		t.Errorf("relay build = %q, want . (the Dockerfile at the root)", relay.Build)
	}
	_, port, _ := net.SplitHostPort(c.HTTPAddr)
	if !slices.ContainsFunc(relay.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) {
		t.Errorf("relay ports %v do not publish RELAY_HTTP_ADDR's port %s", relay.Ports, port)
	}
	if hc := relay.Healthcheck.Test; hc != nil {
		if len(hc) < 3 || hc[0] != "CMD" || hc[1] != "/outbox-relay" {
			t.Errorf("relay healthcheck %q: want [CMD /outbox-relay healthcheck] (exec form: the image has no shell)", hc)
		} else if _, ok := lookup(hc[2]); !ok {
			t.Errorf("relay healthcheck: unknown command %q", hc[2])
		}
	}

	// The subscriber reads the relay's stream on the relay's NATS, and the
	// producer writes the relay's table.
	sub := f.Services["subscriber"]
	if got := sub.env(t)["NATS_URL"]; got != sinkEnvOf[natsEnv](&c).URL {
		t.Errorf("subscriber NATS_URL = %q, want the relay's %q", got, sinkEnvOf[natsEnv](&c).URL)
	}
	script := strings.Join(sub.Command, "\n")
	for _, want := range []string{sinkEnvOf[natsEnv](&c).Stream, sinkEnvOf[natsEnv](&c).SubjectPrefix + ">"} {
		if !strings.Contains(script, want) {
			t.Errorf("the subscriber's command does not mention %q:\n%s", want, script)
		}
	}
	script = strings.Join(f.Services["producer"].Command, "\n")
	for _, want := range []string{"to_regclass('" + c.Schema + ".messages')", "INSERT INTO " + c.Schema + ".messages", "BEGIN;", "COMMIT;"} {
		if !strings.Contains(script, want) {
			t.Errorf("the producer's command does not contain %q", want)
		}
	}
}

// TestCompose_KafkaProfile checks the optional Kafka quick start: only
// under the profile kafka (plain `docker compose up` is unchanged), a relay
// whose environment the binary accepts, in a schema of its own, producing
// to the kafka service, a topic created for the producer's rows, and a
// producer and a consumer that agree with the relay.
func TestCompose_KafkaProfile(t *testing.T) {
	f := readCompose(t)
	for name, s := range f.Services {
		kafka := strings.Contains(name, "kafka")
		if got := slices.Contains(s.Profiles, "kafka"); got != kafka {
			t.Errorf("service %s: profiles %q; want the kafka profile on the Kafka services only", name, s.Profiles)
		}
	}
	relay, ok := f.Services["relay-kafka"]
	if !ok {
		t.Fatal("docker-compose.yml has no service relay-kafka")
	}
	c, err := loadConfig(environOf(relay.env(t)))
	if err != nil {
		t.Fatalf("relay-kafka's environment is refused: %v", err)
	}
	if err := c.requireSinks(nil); err != nil {
		t.Error(err)
	}
	if names := c.sinkNames(); len(names) != 1 || names[0] != "kafka" {
		t.Errorf("relay-kafka's sinks: %v, want kafka only", names)
	}
	main, _ := loadConfig(environOf(f.Services["relay"].env(t)))
	if c.Schema == main.Schema {
		t.Errorf("relay-kafka uses the NATS relay's schema %s: the two would take each other's rows", c.Schema)
	}
	if relay.Build != "." {
		t.Errorf("relay-kafka build = %q, want .", relay.Build)
	}
	if brokers := sinkEnvOf[kafkaEnv](&c).brokers(); len(brokers) != 1 || !strings.HasPrefix(brokers[0], "kafka:") {
		t.Errorf("KAFKA_BROKERS=%s, want the kafka service", sinkEnvOf[kafkaEnv](&c).Brokers)
	}
	topic := sinkEnvOf[kafkaEnv](&c).TopicPrefix + "orders.created"
	for _, svc := range []string{"kafka-topics", "consumer-kafka"} {
		if !slices.Contains(f.Services[svc].Command, topic) {
			t.Errorf("%s's command does not name the topic %s", svc, topic)
		}
	}
	script := strings.Join(f.Services["producer-kafka"].Command, "\n")
	for _, want := range []string{"to_regclass('" + c.Schema + ".messages')", "INSERT INTO " + c.Schema + ".messages", "'orders.created'", "BEGIN;", "COMMIT;"} {
		if !strings.Contains(script, want) {
			t.Errorf("producer-kafka's command does not contain %q", want)
		}
	}
}

// environOf turns a service's environment into NAME=value pairs.
func environOf(vars map[string]string) []string {
	var out []string
	for name, value := range vars {
		out = append(out, name+"="+value)
	}
	return out
}

// dockerfile returns the Dockerfile's instructions, continuation lines
// joined, comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(repoFile("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	return out
}

// instruction returns the arguments of the last instruction named name.
func instruction(lines []string, name string) string {
	var last string
	for _, l := range lines {
		if k, v, _ := strings.Cut(l, " "); strings.EqualFold(k, name) {
			last = strings.TrimSpace(v)
		}
	}
	return last
}

func execForm(t *testing.T, name, args string) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		t.Fatalf("%s %s: want the exec form (a JSON array): the image has no shell", name, args)
	}
	return argv
}

func TestDockerfile_InStepWithTheBinary(t *testing.T) {
	lines := dockerfile(t)

	build := instruction(lines, "RUN")
	if !strings.Contains(build, ".ci/build /out/outbox-relay") || !strings.Contains(build, "VERSION=") {
		t.Errorf("the last RUN is %q; want it to build with .ci/build (the flags CI uses) and pass VERSION", build)
	}
	if got := instruction(lines, "USER"); got != "65532:65532" {
		t.Errorf("USER %s, want 65532:65532 (distroless nonroot, numeric)", got)
	}

	if ep := execForm(t, "ENTRYPOINT", instruction(lines, "ENTRYPOINT")); !slices.Equal(ep, []string{"/outbox-relay"}) {
		t.Errorf("ENTRYPOINT %q", ep)
	}
	cmd := execForm(t, "CMD", instruction(lines, "CMD"))
	if len(cmd) != 1 {
		t.Fatalf("CMD %q, want one subcommand", cmd)
	}
	if _, ok := lookup(cmd[0]); !ok {
		t.Errorf("CMD: unknown command %q", cmd[0])
	}

	hc := instruction(lines, "HEALTHCHECK")
	_, probe, ok := strings.Cut(hc, " CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %q has no CMD", hc)
	}
	argv := execForm(t, "HEALTHCHECK CMD", strings.TrimSpace(probe))
	if len(argv) < 2 || argv[0] != "/outbox-relay" {
		t.Fatalf("HEALTHCHECK CMD %q, want /outbox-relay healthcheck", argv)
	}
	if _, ok := lookup(argv[1]); !ok {
		t.Errorf("HEALTHCHECK: unknown command %q", argv[1])
	}

	var def string
	for _, v := range envReference() {
		if v.Name == "RELAY_HTTP_ADDR" {
			def = v.Default
		}
	}
	_, port, err := net.SplitHostPort(def)
	if err != nil {
		t.Fatal(err)
	}
	if got := instruction(lines, "EXPOSE"); got != port {
		t.Errorf("EXPOSE %s, want %s (RELAY_HTTP_ADDR's default %s)", got, port, def)
	}
}

// TestHelmChart_CopiesOfDeployFiles keeps the Helm chart's copies of the
// alert pack and the dashboard identical to deploy/prometheus and
// deploy/grafana, their single source: Helm reads only files inside the
// chart, and copies (unlike symbolic links) survive every checkout and
// packaging tool. Edit the originals, then copy them over.
func TestHelmChart_CopiesOfDeployFiles(t *testing.T) {
	for _, original := range []string{rulesFile, dashboardFile} {
		chartCopy := "deploy/helm/outbox-relay/files/" + filepath.Base(original)
		want, err := os.ReadFile(repoFile(original))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(repoFile(chartCopy))
		if err != nil {
			t.Fatalf("%v (the chart ships a copy of %s)", err, original)
		}
		if fi, err := os.Lstat(repoFile(chartCopy)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s is not a regular file: copy %s there", chartCopy, original)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: cp %s %s", chartCopy, original, original, chartCopy)
		}
	}
}
