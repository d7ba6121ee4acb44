package cli

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
	pubsubsink "github.com/outbox-relay/outbox-relay/sinks/pubsub"
)

// pubsubKind is the pubsub sink (sinks/pubsub).
var pubsubKind = sinkKind{
	name:      "pubsub",
	prefix:    "PUBSUB_",
	enabledBy: "PUBSUB_PROJECT",
	timeout:   "PUBSUB_TIMEOUT",
	problems:  []string{pubsubsink.ProblemAuthFailed, pubsubsink.ProblemNoTopic, pubsubsink.ProblemNoTopics, pubsubsink.ProblemPublishDenied},
	env:       func() sinkEnv { return new(pubsubEnv) },
}

// pubsubEnv is the pubsub sink's configuration.
type pubsubEnv struct {
	Project      string        `env:"PUBSUB_PROJECT" doc:"Google Cloud project of the Pub/Sub topics; enables the pubsub sink. Credentials are the application default credentials (workload identity on GKE) unless PUBSUB_CREDENTIALS is set." allowed:"a project ID: lowercase letters, digits and hyphens (a domain-scoped project as domain:project)"`
	Topic        string        `env:"PUBSUB_TOPIC" doc:"Topic ID every message goes to; the row's topic travels in the outbox_topic attribute. Empty: each row goes to PUBSUB_TOPIC_PREFIX followed by its topic." allowed:"empty, or a topic ID: 3 to 255 of ASCII letters, digits and - _ . ~ + %, starting with a letter, not with goog; not with PUBSUB_TOPIC_PREFIX"`
	TopicPrefix  string        `env:"PUBSUB_TOPIC_PREFIX" doc:"Prepended to the row's topic to form the topic ID, like events. for events.orders.created. A row naming a topic that does not exist is dead-lettered." allowed:"empty, or up to 254 of the characters of a topic ID, starting with a letter, not with goog; not with PUBSUB_TOPIC"`
	Timeout      time.Duration `env:"PUBSUB_TIMEOUT" envDefault:"10s" doc:"How long a publish may wait for Pub/Sub's acknowledgement, the client's own retries included, before the message is retried." allowed:"a duration of at least 1s and at most 60% of RELAY_LEASE"`
	Endpoint     string        `env:"PUBSUB_ENDPOINT" doc:"Pub/Sub endpoint to publish to instead of pubsub.googleapis.com:443, like a locational endpoint (europe-west1-pubsub.googleapis.com:443), which keeps an ordering key's messages in one region." allowed:"host:port; not with PUBSUB_EMULATOR_HOST"`
	EmulatorHost string        `env:"PUBSUB_EMULATOR_HOST" doc:"Address of a Pub/Sub emulator, as Google's client libraries read it: plaintext, no credentials. For tests and development only." allowed:"host:port; not with PUBSUB_ENDPOINT or PUBSUB_CREDENTIALS"`
	Credentials  string        `env:"PUBSUB_CREDENTIALS" redact:"secret" doc:"A service account key (the JSON file gcloud iam service-accounts keys create writes), for clusters without workload identity; usually given as PUBSUB_CREDENTIALS_FILE. Empty: the application default credentials. Never logged." allowed:"a JSON key of type service_account"`
}

func (e *pubsubEnv) deliveryTimeout() time.Duration { return e.Timeout }

// validate checks the pubsub settings. The key is never repeated in an
// error.
func (e *pubsubEnv) validate(c *config) error {
	if e.Project != "" && !validProjectID(e.Project) {
		return c.refuse("PUBSUB_PROJECT", "not a Google Cloud project ID")
	}
	if e.Topic != "" {
		if err := pubsubsink.ValidateTopicID(e.Topic); err != nil {
			return c.refuse("PUBSUB_TOPIC", err.Error())
		}
		if e.TopicPrefix != "" {
			return c.refuse("PUBSUB_TOPIC_PREFIX", "set together with PUBSUB_TOPIC, which sends every row to one topic: set one of them")
		}
	}
	if err := pubsubsink.ValidateTopicPrefix(e.TopicPrefix); err != nil {
		return c.refuse("PUBSUB_TOPIC_PREFIX", err.Error())
	}
	if e.Timeout < pubsubsink.TimeoutMin {
		return c.refuse("PUBSUB_TIMEOUT", "shorter than a second")
	}
	for _, v := range []struct{ name, value string }{{"PUBSUB_ENDPOINT", e.Endpoint}, {"PUBSUB_EMULATOR_HOST", e.EmulatorHost}} {
		if v.value == "" {
			continue
		}
		host, port, err := net.SplitHostPort(v.value)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return c.refuse(v.name, "not host:port")
		}
	}
	switch {
	case e.EmulatorHost != "" && e.Endpoint != "":
		return c.refuse("PUBSUB_ENDPOINT", "set together with PUBSUB_EMULATOR_HOST: set one of them")
	case e.EmulatorHost != "" && e.Credentials != "":
		return c.refuse("PUBSUB_CREDENTIALS", "set together with PUBSUB_EMULATOR_HOST, which takes no credentials")
	}
	if e.Credentials != "" {
		if err := pubsubsink.ValidateCredentials([]byte(e.Credentials)); err != nil {
			return &configError{Var: "PUBSUB_CREDENTIALS", Reason: err.Error(), Allowed: configField("PUBSUB_CREDENTIALS").allowed()}
		}
	}
	return nil
}

// validProjectID reports whether id can be a Google Cloud project ID:
// lowercase letters, digits and hyphens, starting with a letter, optionally
// after a domain and a colon (domain-scoped projects).
func validProjectID(id string) bool {
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		domain := id[:i]
		if domain == "" || strings.ContainsFunc(domain, func(r rune) bool {
			return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '.')
		}) {
			return false
		}
		id = id[i+1:]
	}
	if len(id) < 6 || len(id) > 30 || id[0] < 'a' || id[0] > 'z' || id[len(id)-1] == '-' {
		return false
	}
	return !strings.ContainsFunc(id, func(r rune) bool { return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-') })
}

func (e *pubsubEnv) settings(_ *config, version string) any {
	cfg := pubsubsink.Config{
		Project:      e.Project,
		Topic:        e.Topic,
		TopicPrefix:  e.TopicPrefix,
		Timeout:      e.Timeout,
		Endpoint:     e.Endpoint,
		EmulatorHost: e.EmulatorHost,
		UserAgent:    "outbox-relay/" + version,
	}
	if e.Credentials != "" {
		cfg.CredentialsJSON = pubsubsink.Credentials(e.Credentials)
	}
	return cfg
}

func (e *pubsubEnv) open(settings any, log *slog.Logger) (sinks.Sink, error) {
	cfg := settings.(pubsubsink.Config)
	cfg.Logger = log
	if cfg.Topic == "" && cfg.TopicPrefix == "" {
		log.Warn("neither PUBSUB_TOPIC nor PUBSUB_TOPIC_PREFIX is set: a row's topic is the whole Pub/Sub topic ID, so rows can publish to any topic of the project the relay's principal may; set PUBSUB_TOPIC_PREFIX, or grant roles/pubsub.publisher on the event topics only", "sink", "pubsub")
	}
	if cfg.EmulatorHost != "" {
		log.Warn("PUBSUB_EMULATOR_HOST is set: publishing in plaintext, without credentials, to an emulator", "sink", "pubsub", "emulator", cfg.EmulatorHost)
	}
	s, err := pubsubsink.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("open the pubsub sink: %w", err)
	}
	return s, nil
}
