package webhook

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults for Config.
const (
	TimeoutDefault       = 10 * time.Second
	ConcurrencyDefault   = 64
	MaxRetryAfterDefault = time.Hour
	UserAgentDefault     = "outbox-relay"
	SlowAfterDefault     = time.Second
	// MaxBodyBytesDefault (4 MiB) fits what the common receivers take:
	// Vercel functions take 4.5 MB, AWS Lambda 6 MB, API Gateway 10 MB,
	// Google Cloud Functions 32 MB. nginx's default client_max_body_size
	// is 1 MiB, which webhook endpoints usually raise.
	MaxBodyBytesDefault = 4 << 20
)

// ConcurrencyMax is the largest Config.Concurrency accepted.
const ConcurrencyMax = 1024

// Config configures a Sink.
type Config struct {
	// URL receives every message as a POST (WEBHOOK_URL). http or https
	// only; see ValidateURL. Credentials in it are sent as basic auth and
	// never logged.
	URL string
	// Secrets sign every request (WEBHOOK_SECRET, parsed by ParseSecrets):
	// one webhook-signature entry per secret, so that a receiver can move to
	// a new secret while the old one is still accepted. At least one.
	Secrets []Secret
	// Timeout bounds each request, from connecting to reading the status
	// (WEBHOOK_TIMEOUT). Default TimeoutDefault (10s).
	Timeout time.Duration
	// Concurrency bounds the requests in flight across all Deliver calls
	// (WEBHOOK_CONCURRENCY), from 1 to ConcurrencyMax. Default
	// ConcurrencyDefault (64, chosen by BenchmarkRelay_WebhookVersusBareLoop).
	Concurrency int
	// MaxRetryAfter is the longest pause a Retry-After header can impose
	// (WEBHOOK_MAX_RETRY_AFTER); longer values are cut to it. Default
	// MaxRetryAfterDefault (1h), the relay's default RELAY_BACKOFF_MAX.
	MaxRetryAfter time.Duration
	// SlowAfter is how long a request waits for its response before it
	// gives its concurrency slot up to the next message (see slots.go).
	// Default SlowAfterDefault (1s).
	SlowAfter time.Duration
	// MaxBodyBytes is the largest payload the sink posts
	// (WEBHOOK_MAX_BODY_BYTES); a larger one fails permanently without
	// being sent. Default MaxBodyBytesDefault.
	MaxBodyBytes int64
	// UserAgent is sent with every request. Default UserAgentDefault.
	UserAgent string
	// Logger receives pauses and recoveries, never payloads or secrets.
	// Default slog.Default().
	Logger *slog.Logger
	// TLSCAFile is a PEM file of the CA certificates that verify the
	// endpoint's certificate (WEBHOOK_TLS_CA_FILE), for an endpoint whose
	// certificate a private CA signed. When set, only these certificates
	// are trusted: they replace the system roots, so that no public CA can
	// vouch for the endpoint. Needs an https URL.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a PEM client certificate (chain) and
	// its private key (WEBHOOK_TLS_CERT_FILE, WEBHOOK_TLS_KEY_FILE),
	// presented to endpoints that verify clients (mutual TLS); both or
	// neither. Need an https URL.
	//
	// The TLS files are read once, by New: renewed files take effect at
	// the next start.
	TLSCertFile string
	TLSKeyFile  string
	// Transport sends the requests, for tests; it cannot be combined with
	// the TLS files. Default: a clone of http.DefaultTransport (which
	// honours HTTPS_PROXY), keeping Concurrency idle connections, with the
	// TLS files' configuration.
	Transport http.RoundTripper
}

// withDefaults returns c with zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = TimeoutDefault
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = MaxRetryAfterDefault
	}
	if c.SlowAfter == 0 {
		c.SlowAfter = SlowAfterDefault
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = MaxBodyBytesDefault
	}
	if c.UserAgent == "" {
		c.UserAgent = UserAgentDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate names the first field that is out of range.
func (c Config) validate() error {
	if err := ValidateURL(c.URL); err != nil {
		return fmt.Errorf("URL: %w", err)
	}
	switch {
	case len(c.Secrets) == 0:
		return errors.New("Secrets: at least one whsec_ secret is required")
	case c.Timeout < 0:
		return fmt.Errorf("Timeout: %s is negative", c.Timeout)
	case c.Concurrency < 1 || c.Concurrency > ConcurrencyMax:
		return fmt.Errorf("Concurrency: %d is not from 1 to %d", c.Concurrency, ConcurrencyMax)
	case c.MaxRetryAfter < 0:
		return fmt.Errorf("MaxRetryAfter: %s is negative", c.MaxRetryAfter)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("MaxBodyBytes: %d is negative", c.MaxBodyBytes)
	}
	for i, s := range c.Secrets {
		if len(s.key) == 0 {
			return fmt.Errorf("Secrets: secret %d is empty; make secrets with ParseSecrets", i+1)
		}
	}
	return c.validateTLS()
}

// ValidateURL reports whether raw can be a webhook URL: an absolute http or
// https URL with a host. Its errors never repeat the URL, which may hold
// credentials or a token.
func ValidateURL(raw string) error {
	if raw == "" {
		return errors.New("empty; want an http:// or https:// URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the URL: leave it out.
		return errors.New("not a valid URL; want an http:// or https:// URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return errors.New("no scheme; want an http:// or https:// URL")
	default:
		return fmt.Errorf("scheme %q is not allowed; want http:// or https://", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return errors.New("no host; want an http:// or https:// URL with a host")
	}
	if u.Hostname() == "" {
		return errors.New("empty host name; want an http:// or https:// URL with a host")
	}
	return nil
}

// RedactURL is raw for logs: scheme and host only. Credentials, path and
// query may all hold a secret (Slack and Teams put their token in the
// path).
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host}
	s := r.String()
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		s += "/(path not shown)"
	}
	return s
}
