package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
	redissink "github.com/outbox-relay/outbox-relay/sinks/redis"
)

// redisKind is the redis sink (sinks/redis).
var redisKind = sinkKind{
	name:      "redis",
	prefix:    "REDIS_",
	enabledBy: "REDIS_URL",
	timeout:   "REDIS_TIMEOUT",
	problems:  []string{redissink.ProblemAuthFailed, redissink.ProblemTLSFailed, redissink.ProblemNoPermission, redissink.ProblemEvictionPolicy},
	env:       func() sinkEnv { return new(redisEnv) },
}

// redisEnv is the redis sink's configuration.
type redisEnv struct {
	URL             string        `env:"REDIS_URL" redact:"may hold credentials" doc:"Redis server to append stream entries to; enables the redis sink. redis://[user:password@]host[:port][/db], or rediss:// for TLS. The password is never logged." allowed:"a redis:// or rediss:// URL with a host and no query parameters; percent-encode reserved characters of the user name and password"`
	Username        string        `env:"REDIS_USERNAME" doc:"Redis ACL user to authenticate as; replaces the URL's user. Unset: the URL's, or the default user." allowed:"a user name; needs a password (REDIS_PASSWORD or the URL's)"`
	Password        string        `env:"REDIS_PASSWORD" redact:"secret" doc:"Password of the Redis user (AUTH); keep the URL free of it. Never logged." allowed:"a password; not with a password in REDIS_URL"`
	StreamPrefix    string        `env:"REDIS_STREAM_PREFIX" doc:"Prepended to the row's topic to name its stream, like events: for events:orders.created. Give the relay's ACL user only the keys under it (~events:*)." allowed:"empty, or up to 256 bytes of printable UTF-8"`
	MaxLen          int64         `env:"REDIS_MAXLEN" envDefault:"0" doc:"When positive, each XADD trims its stream to about this many entries (MAXLEN ~): Redis trims whole nodes, so a stream keeps somewhat more. 0 trims nothing; consumers or a job trim instead." allowed:"an integer of at least 0"`
	Timeout         time.Duration `env:"REDIS_TIMEOUT" envDefault:"10s" doc:"How long a batch's pipeline of XADDs may take, and any read or write on a connection, before its messages are retried." allowed:"a duration of at least 1s and at most 60% of RELAY_LEASE"`
	MaxMessageBytes int           `env:"REDIS_MAX_MESSAGE_BYTES" envDefault:"1048576" doc:"Largest stream entry the relay appends, counting every field's name and value (payload, idempotency key, topic, key, headers); a larger one goes to the dead letters at once, without being sent." allowed:"an integer from 1024 to 536870912 (Redis's default proto-max-bulk-len)"`
	TLSCAFile       string        `env:"REDIS_TLS_CA_FILE" doc:"PEM file of the CA certificates that verify the server, for rediss://. Default: the system's." allowed:"a readable PEM file of certificates; needs a rediss:// REDIS_URL"`
	TLSCertFile     string        `env:"REDIS_TLS_CERT_FILE" doc:"PEM client certificate, for servers that require one (tls-auth-clients yes)." allowed:"a readable PEM certificate; with REDIS_TLS_KEY_FILE and a rediss:// REDIS_URL"`
	TLSKeyFile      string        `env:"REDIS_TLS_KEY_FILE" doc:"PEM private key of REDIS_TLS_CERT_FILE." allowed:"a readable PEM private key; with REDIS_TLS_CERT_FILE and a rediss:// REDIS_URL"`
}

func (e *redisEnv) deliveryTimeout() time.Duration { return e.Timeout }

// validate checks the redis settings. The URL and the password are never
// repeated in an error, nor the parser's message.
func (e *redisEnv) validate(c *config) error {
	tlsURL, urlPassword := false, false
	if e.URL != "" {
		if _, err := redissink.ParseURL(e.URL); err != nil {
			return c.refuse("REDIS_URL", err.Error())
		}
		u, _ := url.Parse(e.URL)
		tlsURL = u.Scheme == "rediss"
		if u.User != nil {
			_, urlPassword = u.User.Password()
		}
	}
	switch {
	case e.Password != "" && urlPassword:
		return c.refuse("REDIS_PASSWORD", "REDIS_URL holds a password too: set one of them")
	case e.Username != "" && e.Password == "" && !urlPassword:
		return c.refuse("REDIS_USERNAME", "set without a password (REDIS_PASSWORD or the URL's)")
	}
	if err := redissink.ValidateStreamPrefix(e.StreamPrefix); err != nil {
		return c.refuse("REDIS_STREAM_PREFIX", err.Error())
	}
	switch {
	case e.MaxLen < 0:
		return c.refuse("REDIS_MAXLEN", "negative")
	case e.Timeout < time.Second:
		return c.refuse("REDIS_TIMEOUT", "shorter than a second")
	case e.MaxMessageBytes < redissink.MaxMessageBytesMin || e.MaxMessageBytes > redissink.MaxMessageBytesMax:
		return c.refuse("REDIS_MAX_MESSAGE_BYTES", "out of range")
	}
	for _, f := range []struct{ name, value string }{
		{"REDIS_TLS_CA_FILE", e.TLSCAFile}, {"REDIS_TLS_CERT_FILE", e.TLSCertFile}, {"REDIS_TLS_KEY_FILE", e.TLSKeyFile},
	} {
		if f.value != "" && !tlsURL {
			return c.refuse(f.name, "TLS files need a rediss:// REDIS_URL")
		}
	}
	return c.checkTLSFiles("REDIS_TLS_CA_FILE", "REDIS_TLS_CERT_FILE", "REDIS_TLS_KEY_FILE")
}

func (e *redisEnv) settings(_ *config, _ string) any {
	return redissink.Config{
		URL:             e.URL,
		Username:        e.Username,
		Password:        redissink.Password(e.Password),
		StreamPrefix:    e.StreamPrefix,
		MaxLen:          e.MaxLen,
		Timeout:         e.Timeout,
		MaxMessageBytes: e.MaxMessageBytes,
		TLSCAFile:       e.TLSCAFile,
		TLSCertFile:     e.TLSCertFile,
		TLSKeyFile:      e.TLSKeyFile,
	}
}

func (e *redisEnv) open(settings any, log *slog.Logger) (sinks.Sink, error) {
	cfg := settings.(redissink.Config)
	cfg.Logger = log
	if cfg.StreamPrefix == "" {
		log.Warn("REDIS_STREAM_PREFIX is not set: a row's topic is the whole stream name, so rows can append to any stream the relay's user may write; set REDIS_STREAM_PREFIX, and give the user only the keys under it (ACL SETUSER … ~prefix*)", "sink", "redis")
	}
	s, err := redissink.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("open the redis sink: %w", err)
	}
	return s, nil
}
