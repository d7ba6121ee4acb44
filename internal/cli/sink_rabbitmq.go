package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/rabbitmq"
)

// rabbitmqKind is the rabbitmq sink (sinks/rabbitmq).
var rabbitmqKind = sinkKind{
	name:      "rabbitmq",
	prefix:    "RABBITMQ_",
	enabledBy: "RABBITMQ_URL",
	timeout:   "RABBITMQ_CONFIRM_TIMEOUT",
	problems:  []string{rabbitmq.ProblemNoExchange, rabbitmq.ProblemAuthFailed, rabbitmq.ProblemVhostRefused, rabbitmq.ProblemTLSFailed},
	env:       func() sinkEnv { return new(rabbitmqEnv) },
}

// rabbitmqEnv is the rabbitmq sink's configuration.
type rabbitmqEnv struct {
	URL             string        `env:"RABBITMQ_URL" redact:"may hold credentials" doc:"RabbitMQ AMQP URI; enables the rabbitmq sink. The path is the virtual host (amqp://user:pass@host:5672/vhost; %2F or nothing for /). The password is never logged." allowed:"an amqp:// or amqps:// URI with a host; percent-encode reserved characters of the user name and password"`
	Exchange        string        `env:"RABBITMQ_EXCHANGE" envDefault:"amq.topic" doc:"Exchange every message is published to, with the topic as routing key. It must exist (amq.topic always does), and queues must be bound to it: a message no queue is bound for is returned and retried." allowed:"an exchange name: 1 to 255 letters, digits, -, _, . or :"`
	ConfirmTimeout  time.Duration `env:"RABBITMQ_CONFIRM_TIMEOUT" envDefault:"10s" doc:"How long a batch may take from its first publish to its last publisher confirm; unconfirmed messages are then retried." allowed:"a positive duration of at most 60% of RELAY_LEASE"`
	MaxMessageBytes int64         `env:"RABBITMQ_MAX_MESSAGE_BYTES" doc:"Largest payload the relay publishes to RabbitMQ; a larger one goes to the dead letters at once, without being sent. Keep it at most the broker's max_message_size. Unset: the broker's default for its version, 16 MiB from RabbitMQ 4.0, 128 MiB before." allowed:"an integer number of bytes from 1 to 536870912 (RabbitMQ's own ceiling)"`
	TLSCAFile       string        `env:"RABBITMQ_TLS_CA_FILE" doc:"PEM file of the CA certificates that verify the broker, for amqps://. Default: the system's." allowed:"a PEM file; needs an amqps:// RABBITMQ_URL"`
	TLSCertFile     string        `env:"RABBITMQ_TLS_CERT_FILE" doc:"PEM client certificate, for amqps:// brokers that require one." allowed:"a PEM file; needs RABBITMQ_TLS_KEY_FILE and an amqps:// RABBITMQ_URL"`
	TLSKeyFile      string        `env:"RABBITMQ_TLS_KEY_FILE" doc:"PEM private key of RABBITMQ_TLS_CERT_FILE." allowed:"a PEM file; needs RABBITMQ_TLS_CERT_FILE and an amqps:// RABBITMQ_URL"`
}

func (e *rabbitmqEnv) deliveryTimeout() time.Duration { return e.ConfirmTimeout }

// validate checks the rabbitmq settings. The URL is never repeated in an
// error, nor the parser's message, which may: it may hold a password.
func (e *rabbitmqEnv) validate(c *config) error {
	amqps := false
	if e.URL != "" {
		u, err := url.Parse(e.URL)
		if err != nil || u.Host == "" {
			return c.refuse("RABBITMQ_URL", "not a URL with a host")
		}
		switch u.Scheme {
		case "amqp":
		case "amqps":
			amqps = true
		default:
			return c.refuse("RABBITMQ_URL", fmt.Sprintf("unsupported scheme %q", u.Scheme))
		}
		if _, err := amqp.ParseURI(e.URL); err != nil {
			return c.refuse("RABBITMQ_URL", "not a valid AMQP URI (a bad port, or reserved characters in the user name or password that are not percent-encoded)")
		}
	}
	if err := rabbitmq.ValidateExchange(e.Exchange); err != nil {
		return c.refuse("RABBITMQ_EXCHANGE", "")
	}
	if e.ConfirmTimeout <= 0 {
		return c.refuse("RABBITMQ_CONFIRM_TIMEOUT", "not positive")
	}
	if e.MaxMessageBytes < 0 || e.MaxMessageBytes > rabbitmq.MaxMessageBytesMax {
		return c.refuse("RABBITMQ_MAX_MESSAGE_BYTES", "out of range")
	}
	for _, f := range []struct{ name, value string }{
		{"RABBITMQ_TLS_CA_FILE", e.TLSCAFile}, {"RABBITMQ_TLS_CERT_FILE", e.TLSCertFile}, {"RABBITMQ_TLS_KEY_FILE", e.TLSKeyFile},
	} {
		if f.value != "" && !amqps {
			return c.refuse(f.name, "TLS files need an amqps:// RABBITMQ_URL")
		}
	}
	switch {
	case e.TLSCertFile != "" && e.TLSKeyFile == "":
		return c.refuse("RABBITMQ_TLS_CERT_FILE", "set without RABBITMQ_TLS_KEY_FILE")
	case e.TLSKeyFile != "" && e.TLSCertFile == "":
		return c.refuse("RABBITMQ_TLS_KEY_FILE", "set without RABBITMQ_TLS_CERT_FILE")
	}
	return nil
}

func (e *rabbitmqEnv) settings(_ *config, version string) any {
	return rabbitmq.Config{
		URL:             e.URL,
		Exchange:        e.Exchange,
		ConfirmTimeout:  e.ConfirmTimeout,
		MaxMessageBytes: e.MaxMessageBytes,
		TLSCAFile:       e.TLSCAFile,
		TLSCertFile:     e.TLSCertFile,
		TLSKeyFile:      e.TLSKeyFile,
		ClientName:      "outbox-relay/" + version,
	}
}

func (e *rabbitmqEnv) open(settings any, log *slog.Logger) (sinks.Sink, error) {
	cfg := settings.(rabbitmq.Config)
	cfg.Logger = log
	return rabbitmq.New(cfg)
}
