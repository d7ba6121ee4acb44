package cli

import (
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// webhookKind is the webhook sink (sinks/webhook).
var webhookKind = sinkKind{
	name:      "webhook",
	prefix:    "WEBHOOK_",
	enabledBy: "WEBHOOK_URL",
	timeout:   "WEBHOOK_TIMEOUT",
	env:       func() sinkEnv { return new(webhookEnv) },
}

// webhookEnv is the webhook sink's configuration.
type webhookEnv struct {
	URL           string        `env:"WEBHOOK_URL" redact:"may hold credentials" doc:"Enables the webhook sink: every message for it is POSTed here, signed as Standard Webhooks. Credentials and query are never logged." allowed:"an http:// or https:// URL with a host"`
	Secret        string        `env:"WEBHOOK_SECRET" redact:"secret" doc:"Standard Webhooks signing secret(s); required with WEBHOOK_URL. Several, separated by spaces or commas, each sign every request (rotation). Never logged." allowed:"whsec_ followed by base64 of 24 to 64 bytes"`
	Timeout       time.Duration `env:"WEBHOOK_TIMEOUT" envDefault:"10s" doc:"Per request, from connecting to reading the response status." allowed:"a positive duration of at most 60% of RELAY_LEASE"`
	Concurrency   int           `env:"WEBHOOK_CONCURRENCY" envDefault:"64" doc:"Requests in flight to WEBHOOK_URL, over all batches." allowed:"an integer from 1 to 1024"`
	MaxRetryAfter time.Duration `env:"WEBHOOK_MAX_RETRY_AFTER" envDefault:"1h" doc:"Longest pause a Retry-After response header can impose on the webhook sink; longer values are cut to this." allowed:"a positive duration"`
	MaxBodyBytes  int64         `env:"WEBHOOK_MAX_BODY_BYTES" envDefault:"4194304" doc:"Largest payload the webhook sink posts; a larger one goes to the dead letters at once, without being sent. The default, 4 MiB, fits the common receivers: Vercel functions take 4.5 MB, AWS Lambda 6 MB, API Gateway 10 MB (nginx's default client_max_body_size is 1 MiB: raise it, or lower this)." allowed:"an integer number of bytes from 1024 to 1073741824"`
	TLSCAFile     string        `env:"WEBHOOK_TLS_CA_FILE" doc:"Path of a PEM file of the CA certificate(s) that sign the endpoint's certificate (a private CA). When set, only these CAs are trusted: they replace the system roots, so no public CA can vouch for the endpoint. Read at start." allowed:"a readable PEM file of one or more certificates; needs an https:// WEBHOOK_URL"`
	TLSCertFile   string        `env:"WEBHOOK_TLS_CERT_FILE" doc:"Path of a PEM client certificate (and any intermediates) for endpoints that require one (mutual TLS). Read at start." allowed:"a readable PEM certificate; needs WEBHOOK_TLS_KEY_FILE and an https:// WEBHOOK_URL"`
	TLSKeyFile    string        `env:"WEBHOOK_TLS_KEY_FILE" doc:"Path of the PEM private key of WEBHOOK_TLS_CERT_FILE. What it holds is never logged." allowed:"a readable PEM private key matching WEBHOOK_TLS_CERT_FILE"`
}

// webhookFileVars are the webhook sink's variables that name files.
var webhookFileVars = []string{"WEBHOOK_TLS_CA_FILE", "WEBHOOK_TLS_CERT_FILE", "WEBHOOK_TLS_KEY_FILE"}

const secretAllowed = "whsec_ followed by base64 of 24 to 64 bytes; several separated by spaces or commas"

func (e *webhookEnv) deliveryTimeout() time.Duration { return e.Timeout }

// validate checks the webhook settings. The URL and the secrets are never
// repeated in an error: they may hold credentials.
func (e *webhookEnv) validate(c *config) error {
	switch {
	case e.Timeout <= 0:
		return c.refuse("WEBHOOK_TIMEOUT", "not positive")
	case e.Concurrency < 1 || e.Concurrency > webhook.ConcurrencyMax:
		return c.refuse("WEBHOOK_CONCURRENCY", "out of range")
	case e.MaxRetryAfter <= 0:
		return c.refuse("WEBHOOK_MAX_RETRY_AFTER", "not positive")
	case e.MaxBodyBytes < 1024 || e.MaxBodyBytes > 1<<30:
		return c.refuse("WEBHOOK_MAX_BODY_BYTES", "out of range")
	}
	if e.URL == "" {
		if e.Secret != "" {
			return &configError{Var: "WEBHOOK_SECRET", Value: "(not shown: secret)", Reason: "set without WEBHOOK_URL"}
		}
		return c.strayFiles("WEBHOOK_URL", webhookFileVars...)
	}
	if err := webhook.ValidateURL(e.URL); err != nil {
		return c.refuse("WEBHOOK_URL", err.Error())
	}
	if e.Secret == "" {
		return &configError{Var: "WEBHOOK_SECRET", Reason: "required with WEBHOOK_URL: every request is signed", Allowed: secretAllowed}
	}
	if _, err := webhook.ParseSecrets(e.Secret); err != nil {
		return &configError{Var: "WEBHOOK_SECRET", Value: "(not shown: secret)", Reason: err.Error(), Allowed: secretAllowed}
	}
	if u, _ := url.Parse(e.URL); !strings.EqualFold(u.Scheme, "https") {
		for _, name := range webhookFileVars {
			if configField(name).value(c).String() != "" {
				return c.refuse(name, "WEBHOOK_URL is not https://, so there is no TLS to configure")
			}
		}
	}
	return c.checkTLSFiles("WEBHOOK_TLS_CA_FILE", "WEBHOOK_TLS_CERT_FILE", "WEBHOOK_TLS_KEY_FILE")
}

func (e *webhookEnv) settings(_ *config, version string) any {
	secrets, _ := webhook.ParseSecrets(e.Secret) // validated
	return webhook.Config{
		URL:           e.URL,
		Secrets:       secrets,
		Timeout:       e.Timeout,
		Concurrency:   e.Concurrency,
		MaxRetryAfter: e.MaxRetryAfter,
		MaxBodyBytes:  e.MaxBodyBytes,
		UserAgent:     "outbox-relay/" + version,
		TLSCAFile:     e.TLSCAFile,
		TLSCertFile:   e.TLSCertFile,
		TLSKeyFile:    e.TLSKeyFile,
	}
}

func (e *webhookEnv) open(settings any, log *slog.Logger) (sinks.Sink, error) {
	cfg := settings.(webhook.Config)
	cfg.Logger = log
	return webhook.New(cfg)
}
