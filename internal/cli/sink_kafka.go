package cli

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
)

// kafkaKind is the kafka sink (sinks/kafka).
var kafkaKind = sinkKind{
	name:      "kafka",
	prefix:    "KAFKA_",
	enabledBy: "KAFKA_BROKERS",
	timeout:   "KAFKA_PRODUCE_TIMEOUT",
	problems:  []string{kafkasink.ProblemAuthFailed, kafkasink.ProblemNoProducerID, kafkasink.ProblemNoTopics},
	env:       func() sinkEnv { return new(kafkaEnv) },
}

// kafkaEnv is the kafka sink's configuration.
type kafkaEnv struct {
	Brokers         string        `env:"KAFKA_BROKERS" doc:"Kafka seed brokers, comma-separated; enables the kafka sink. The client discovers the rest of the cluster from them." allowed:"host:port pairs separated by commas, like kafka-1:9092,kafka-2:9092"`
	TopicPrefix     string        `env:"KAFKA_TOPIC_PREFIX" doc:"Prepended to the row's topic to form the Kafka topic, like events. for events.orders.created." allowed:"empty, or up to 248 of the characters Kafka allows in topic names (letters, digits, '.', '_', '-'), not starting with _"`
	ProduceTimeout  time.Duration `env:"KAFKA_PRODUCE_TIMEOUT" envDefault:"10s" doc:"How long a record may wait for Kafka's acknowledgement (acks=all) before the message is retried." allowed:"a duration of at least 1s and at most 60% of RELAY_LEASE"`
	MaxMessageBytes int           `env:"KAFKA_MAX_MESSAGE_BYTES" envDefault:"1000012" doc:"Largest record batch the relay sends; a message larger than this on its own goes to the dead letters at once. Keep it at most the topics' max.message.bytes." allowed:"an integer from 512 to 104857600"`
	SASLMechanism   string        `env:"KAFKA_SASL_MECHANISM" doc:"SASL mechanism to authenticate with; empty: no SASL." allowed:"PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"`
	SASLUsername    string        `env:"KAFKA_SASL_USERNAME" doc:"SASL user." allowed:"a user name; with KAFKA_SASL_MECHANISM and KAFKA_SASL_PASSWORD"`
	SASLPassword    string        `env:"KAFKA_SASL_PASSWORD" redact:"secret" doc:"SASL password. Never logged." allowed:"a password; with KAFKA_SASL_MECHANISM and KAFKA_SASL_USERNAME"`
	TLS             bool          `env:"KAFKA_TLS" envDefault:"false" doc:"Connect to the brokers with TLS, verifying their certificates." allowed:"true or false"`
	TLSCAFile       string        `env:"KAFKA_TLS_CA_FILE" doc:"PEM file of the certificate authorities that sign the brokers' certificates. Default: the system's." allowed:"a readable PEM file of certificates; needs KAFKA_TLS=true"`
	TLSCertFile     string        `env:"KAFKA_TLS_CERT_FILE" doc:"PEM client certificate, for brokers that authenticate clients by certificate (mTLS)." allowed:"a readable PEM certificate; with KAFKA_TLS_KEY_FILE and KAFKA_TLS=true"`
	TLSKeyFile      string        `env:"KAFKA_TLS_KEY_FILE" doc:"PEM private key of KAFKA_TLS_CERT_FILE." allowed:"a readable PEM private key; with KAFKA_TLS_CERT_FILE and KAFKA_TLS=true"`
}

func (e *kafkaEnv) deliveryTimeout() time.Duration { return e.ProduceTimeout }

// validate checks the kafka settings. The password is never repeated in
// an error.
func (e *kafkaEnv) validate(c *config) error {
	if e.Brokers != "" {
		for _, b := range e.brokers() {
			host, port, err := net.SplitHostPort(b)
			if err != nil || host == "" {
				return c.refuse("KAFKA_BROKERS", fmt.Sprintf("%q is not host:port", b))
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return c.refuse("KAFKA_BROKERS", fmt.Sprintf("%q has no valid port", b))
			}
		}
	}
	if err := kafkasink.ValidateTopicPrefix(e.TopicPrefix); err != nil {
		return c.refuse("KAFKA_TOPIC_PREFIX", err.Error())
	}
	switch {
	case e.ProduceTimeout < time.Second:
		return c.refuse("KAFKA_PRODUCE_TIMEOUT", "shorter than a second")
	case e.MaxMessageBytes < kafkasink.MaxMessageBytesMin || e.MaxMessageBytes > kafkasink.MaxMessageBytesMax:
		return c.refuse("KAFKA_MAX_MESSAGE_BYTES", "out of range")
	}
	if err := e.validateSASL(c); err != nil {
		return err
	}
	return e.validateTLS(c)
}

func (e *kafkaEnv) validateSASL(c *config) error {
	s := e.sasl()
	switch {
	case s.Mechanism != "" && !slices.Contains(kafkasink.Mechanisms, s.Mechanism):
		return c.refuse("KAFKA_SASL_MECHANISM", "unknown mechanism")
	case s.Mechanism != "" && s.Username == "":
		return &configError{Var: "KAFKA_SASL_USERNAME", Reason: "required with KAFKA_SASL_MECHANISM", Allowed: configField("KAFKA_SASL_USERNAME").allowed()}
	case s.Mechanism != "" && s.Password == "":
		return &configError{Var: "KAFKA_SASL_PASSWORD", Reason: "required with KAFKA_SASL_MECHANISM", Allowed: configField("KAFKA_SASL_PASSWORD").allowed()}
	case s.Mechanism == "" && s.Username != "":
		return c.refuse("KAFKA_SASL_USERNAME", "set without KAFKA_SASL_MECHANISM")
	case s.Mechanism == "" && s.Password != "":
		return c.refuse("KAFKA_SASL_PASSWORD", "set without KAFKA_SASL_MECHANISM")
	}
	return nil
}

func (e *kafkaEnv) validateTLS(c *config) error {
	files := []struct{ name, value string }{
		{"KAFKA_TLS_CA_FILE", e.TLSCAFile},
		{"KAFKA_TLS_CERT_FILE", e.TLSCertFile},
		{"KAFKA_TLS_KEY_FILE", e.TLSKeyFile},
	}
	for _, f := range files {
		if f.value != "" && !e.TLS {
			return c.refuse(f.name, "set without KAFKA_TLS=true")
		}
	}
	switch {
	case e.TLSCertFile != "" && e.TLSKeyFile == "":
		return &configError{Var: "KAFKA_TLS_KEY_FILE", Reason: "required with KAFKA_TLS_CERT_FILE", Allowed: configField("KAFKA_TLS_KEY_FILE").allowed()}
	case e.TLSKeyFile != "" && e.TLSCertFile == "":
		return &configError{Var: "KAFKA_TLS_CERT_FILE", Reason: "required with KAFKA_TLS_KEY_FILE", Allowed: configField("KAFKA_TLS_CERT_FILE").allowed()}
	}
	// Load each file as the sink will, so that a missing or unreadable
	// one stops the relay here, named.
	if e.TLSCAFile != "" {
		if _, err := (kafkasink.TLS{Enabled: true, CAFile: e.TLSCAFile}).Config(); err != nil {
			return c.refuse("KAFKA_TLS_CA_FILE", err.Error())
		}
	}
	if e.TLSCertFile != "" {
		if _, err := (kafkasink.TLS{Enabled: true, CertFile: e.TLSCertFile, KeyFile: e.TLSKeyFile}).Config(); err != nil {
			return c.refuse("KAFKA_TLS_CERT_FILE", err.Error())
		}
	}
	return nil
}

// brokers returns KAFKA_BROKERS as a list.
func (e *kafkaEnv) brokers() []string {
	var out []string
	for b := range strings.SplitSeq(e.Brokers, ",") {
		out = append(out, strings.TrimSpace(b))
	}
	return out
}

func (e *kafkaEnv) sasl() kafkasink.SASL {
	return kafkasink.SASL{Mechanism: strings.ToUpper(e.SASLMechanism), Username: e.SASLUsername, Password: kafkasink.Password(e.SASLPassword)}
}

func (e *kafkaEnv) settings(c *config, version string) any {
	return kafkasink.Config{
		Brokers:         e.brokers(),
		TopicPrefix:     e.TopicPrefix,
		ProduceTimeout:  e.ProduceTimeout,
		MaxMessageBytes: e.MaxMessageBytes,
		// Room for every row the relay may have in flight to this sink.
		MaxBufferedRecords: 2 * max(c.MaxInFlight, 4*c.BatchSize),
		SASL:               e.sasl(),
		TLS:                kafkasink.TLS{Enabled: e.TLS, CAFile: e.TLSCAFile, CertFile: e.TLSCertFile, KeyFile: e.TLSKeyFile},
		ClientID:           "outbox-relay/" + version,
	}
}

func (e *kafkaEnv) open(settings any, log *slog.Logger) (sinks.Sink, error) {
	cfg := settings.(kafkasink.Config)
	cfg.Logger = log
	if cfg.TopicPrefix == "" {
		log.Warn("KAFKA_TOPIC_PREFIX is not set: a row's topic is the whole Kafka topic, so rows can write to any topic the relay's user may (only the ecosystem's internal topics are refused); set KAFKA_TOPIC_PREFIX, or limit the user's WRITE ACLs to the event topics", "sink", "kafka")
	}
	return kafkasink.New(cfg)
}
