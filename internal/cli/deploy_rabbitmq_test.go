package cli

import (
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestCompose_RabbitMQProfile keeps the rabbitmq profile of
// docker-compose.yml in step with the binary, and out of the default
// `docker compose up`.
func TestCompose_RabbitMQProfile(t *testing.T) {
	f := readCompose(t)
	b, err := os.ReadFile(repoFile("docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var profiles struct {
		Services map[string]struct {
			Profiles []string `yaml:"profiles"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &profiles); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rabbitmq", "rabbitmq-setup", "relay-rabbitmq", "producer-rabbitmq"} {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %q", name)
		}
		if p := profiles.Services[name].Profiles; !slices.Equal(p, []string{"rabbitmq"}) {
			t.Errorf("service %s has profiles %v, want [rabbitmq]: the default docker compose up must not start it", name, p)
		}
	}
	for _, name := range []string{"postgres", "nats", "relay", "producer", "subscriber"} {
		if p := profiles.Services[name].Profiles; len(p) != 0 {
			t.Errorf("service %s has profiles %v: the default docker compose up must start it", name, p)
		}
	}

	var environ []string
	for name, value := range f.Services["relay-rabbitmq"].env(t) {
		environ = append(environ, name+"="+value)
	}
	c, err := loadConfig(environ)
	if err != nil {
		t.Fatalf("the relay-rabbitmq service's environment is refused: %v", err)
	}
	if err := c.requireSinks(nil); err != nil {
		t.Error(err)
	}
	if c.defaultSink() != "rabbitmq" {
		t.Errorf("relay-rabbitmq delivers to %q by default, want rabbitmq", c.defaultSink())
	}
	natsRelay, err := loadConfig(mapEnv(f.Services["relay"].env(t)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Schema == natsRelay.Schema {
		t.Errorf("both relays use schema %s: each would deliver some of the other's rows to its own sink", c.Schema)
	}

	// The relay logs in as the broker's user, to the broker's service.
	u, err := url.Parse(sinkEnvOf[rabbitmqEnv](&c).URL)
	if err != nil {
		t.Fatal(err)
	}
	broker := f.Services["rabbitmq"].env(t)
	pass, _ := u.User.Password()
	if u.Hostname() != "rabbitmq" || u.User.Username() != broker["RABBITMQ_DEFAULT_USER"] || pass != broker["RABBITMQ_DEFAULT_PASS"] {
		t.Errorf("RABBITMQ_URL does not log in to the rabbitmq service as its default user")
	}

	// The producer writes the relay's table, a topic the queue is bound for.
	script := strings.Join(f.Services["producer-rabbitmq"].Command, "\n")
	for _, want := range []string{"to_regclass('" + c.Schema + ".messages')", "INSERT INTO " + c.Schema + ".messages", "'orders.created'", "BEGIN;", "COMMIT;"} {
		if !strings.Contains(script, want) {
			t.Errorf("the producer-rabbitmq command does not contain %q", want)
		}
	}
	setup := strings.Join(f.Services["rabbitmq-setup"].Command, "\n")
	for _, want := range []string{"source=" + sinkEnvOf[rabbitmqEnv](&c).Exchange, "routing_key='orders.#'"} {
		if !strings.Contains(setup, want) {
			t.Errorf("the rabbitmq-setup command does not contain %q", want)
		}
	}
}

// mapEnv turns a service's environment into NAME=value pairs.
func mapEnv(vars map[string]string) []string {
	var out []string
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	return out
}
