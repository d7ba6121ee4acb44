package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
)

// natsKind is the nats sink (sinks/nats).
var natsKind = sinkKind{
	name:      "nats",
	prefix:    "NATS_",
	enabledBy: "NATS_URL",
	timeout:   "NATS_ACK_TIMEOUT",
	problems:  []string{natssink.ProblemNoStream, natssink.ProblemShortDedupWindow},
	env:       func() sinkEnv { return new(natsEnv) },
}

// natsEnv is the nats sink's configuration.
type natsEnv struct {
	URL           string        `env:"NATS_URL" redact:"may hold credentials" doc:"NATS server URL(s), comma-separated; enables the nats sink. Credentials may be embedded (nats://user:pass@host:4222); they are never logged." allowed:"nats://, tls://, ws:// or wss:// URLs"`
	JetStream     bool          `env:"NATS_JETSTREAM" envDefault:"true" doc:"Publish to JetStream and wait for each PubAck. false: core NATS, publish and flush (no persistence, no dedup)." allowed:"true or false"`
	SubjectPrefix string        `env:"NATS_SUBJECT_PREFIX" doc:"Prepended to the topic to form the subject, like events. for events.orders.created. Whatever the prefix, a subject on the control plane ($… or _INBOX…) is never published: such a row is dead-lettered as permanent." allowed:"empty, or at most 512 bytes of subject tokens ending with a dot, without whitespace, control characters or wildcards, not starting with $ or _INBOX"`
	Stream        string        `env:"NATS_STREAM" doc:"When set, create this JetStream stream at start, capturing NATS_SUBJECT_PREFIX + '>' with a duplicate window of RELAY_LEASE + RELAY_BACKOFF_MAX, unless it exists (existing streams are never changed). For quick starts; manage production streams yourself." allowed:"a stream name (letters, digits, - and _); needs NATS_SUBJECT_PREFIX"`
	AckTimeout    time.Duration `env:"NATS_ACK_TIMEOUT" envDefault:"5s" doc:"How long to wait for one JetStream PubAck before the message is retried." allowed:"a positive duration of at most 60% of RELAY_LEASE"`
	CredsFile     string        `env:"NATS_CREDS_FILE" doc:"Path of a NATS credentials file to authenticate with (decentralized JWT auth): a user JWT and its NKey seed, as nsc writes it. Read again at every connection attempt, so a renewed file is used from the next reconnection. What it holds is never logged." allowed:"a readable .creds file; not with NATS_NKEY_SEED_FILE"`
	NKeySeedFile  string        `env:"NATS_NKEY_SEED_FILE" doc:"Path of a file holding a user NKey seed to authenticate with (NKey auth). What it holds is never logged." allowed:"a readable file holding a user seed (SU…); not with NATS_CREDS_FILE"`
	TLSCAFile     string        `env:"NATS_TLS_CA_FILE" doc:"Path of a PEM file of the CA certificate(s) that sign the NATS server's certificate (a private CA). When set, TLS is required and only these CAs are trusted: they replace the system roots." allowed:"a readable PEM file of one or more certificates"`
	TLSCertFile   string        `env:"NATS_TLS_CERT_FILE" doc:"Path of a PEM client certificate (and any intermediates) for servers that verify clients (mutual TLS). When set, TLS is required. Read again at every connection attempt, like NATS_TLS_CA_FILE and NATS_TLS_KEY_FILE." allowed:"a readable PEM certificate; needs NATS_TLS_KEY_FILE"`
	TLSKeyFile    string        `env:"NATS_TLS_KEY_FILE" doc:"Path of the PEM private key of NATS_TLS_CERT_FILE. What it holds is never logged." allowed:"a readable PEM private key matching NATS_TLS_CERT_FILE"`
}

// natsFileVars are the nats sink's variables that name files.
var natsFileVars = []string{"NATS_CREDS_FILE", "NATS_NKEY_SEED_FILE", "NATS_TLS_CA_FILE", "NATS_TLS_CERT_FILE", "NATS_TLS_KEY_FILE"}

var streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

func (e *natsEnv) enabled() bool { return e.URL != "" }

// deliveryTimeout is NATS_ACK_TIMEOUT with JetStream; core NATS waits for
// no acknowledgement.
func (e *natsEnv) deliveryTimeout() time.Duration {
	if !e.JetStream {
		return 0
	}
	return e.AckTimeout
}

func (e *natsEnv) validate(c *config) error {
	if e.URL != "" {
		for u := range strings.SplitSeq(e.URL, ",") {
			p, err := url.Parse(strings.TrimSpace(u))
			if err != nil || p.Host == "" {
				return c.refuse("NATS_URL", "not a URL")
			}
			switch p.Scheme {
			case "nats", "tls", "ws", "wss":
			default:
				return c.refuse("NATS_URL", fmt.Sprintf("unsupported scheme %q", p.Scheme))
			}
		}
	}
	if p := e.SubjectPrefix; p != "" && (!strings.HasSuffix(p, ".") || strings.ContainsAny(p, "*>") || strings.Contains(p, "..") || strings.HasPrefix(p, ".")) {
		return c.refuse("NATS_SUBJECT_PREFIX", "")
	}
	if strings.ContainsFunc(e.SubjectPrefix, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) || r == utf8.RuneError }) {
		return c.refuse("NATS_SUBJECT_PREFIX", "contains whitespace or a control character")
	}
	if len(e.SubjectPrefix) > natssink.SubjectPrefixBytesMax {
		return c.refuse("NATS_SUBJECT_PREFIX", fmt.Sprintf("%d bytes: at most %d", len(e.SubjectPrefix), natssink.SubjectPrefixBytesMax))
	}
	if p := e.SubjectPrefix; strings.HasPrefix(p, "$") || strings.HasPrefix(p, "_INBOX.") {
		return c.refuse("NATS_SUBJECT_PREFIX", "on NATS's control plane ($… APIs, _INBOX replies)")
	}
	if e.Stream != "" {
		switch {
		case !streamName.MatchString(e.Stream):
			return c.refuse("NATS_STREAM", "")
		case e.SubjectPrefix == "":
			return c.refuse("NATS_STREAM", "NATS_SUBJECT_PREFIX is empty, and a stream capturing every subject would capture replies too")
		case !e.JetStream:
			return c.refuse("NATS_STREAM", "NATS_JETSTREAM=false has no streams")
		}
	}
	if e.AckTimeout <= 0 {
		return c.refuse("NATS_ACK_TIMEOUT", "not positive")
	}
	return e.validateFiles(c)
}

// validateFiles checks the credentials and TLS files: set only with
// NATS_URL, one way to authenticate, each file readable and well formed.
// Errors name the variable and never show what a file holds.
func (e *natsEnv) validateFiles(c *config) error {
	if !e.enabled() {
		return c.strayFiles("NATS_URL", natsFileVars...)
	}
	switch {
	case e.CredsFile != "" && e.NKeySeedFile != "":
		return c.refuse("NATS_NKEY_SEED_FILE", "NATS_CREDS_FILE is set too; authenticate with one of them")
	case e.CredsFile != "":
		if err := natssink.CheckCredsFile(e.CredsFile); err != nil {
			return c.refuse("NATS_CREDS_FILE", err.Error())
		}
	case e.NKeySeedFile != "":
		if err := natssink.CheckNKeySeedFile(e.NKeySeedFile); err != nil {
			return c.refuse("NATS_NKEY_SEED_FILE", err.Error())
		}
	}
	return c.checkTLSFiles("NATS_TLS_CA_FILE", "NATS_TLS_CERT_FILE", "NATS_TLS_KEY_FILE")
}

func (e *natsEnv) settings(c *config, version string) any {
	return natssink.Config{
		URL:           e.URL,
		JetStream:     e.JetStream,
		SubjectPrefix: e.SubjectPrefix,
		Stream:        e.Stream,
		// A message re-sent after a lease expiry or the longest retry
		// delay must still be dropped as a duplicate.
		DuplicateWindow: c.Lease + c.BackoffMax,
		AckTimeout:      e.AckTimeout,
		// Room for every row the relay may have in flight to this sink.
		MaxPending:   2 * max(c.MaxInFlight, 4*c.BatchSize),
		ClientName:   "outbox-relay/" + version,
		CredsFile:    e.CredsFile,
		NKeySeedFile: e.NKeySeedFile,
		TLSCAFile:    e.TLSCAFile,
		TLSCertFile:  e.TLSCertFile,
		TLSKeyFile:   e.TLSKeyFile,
	}
}

func (e *natsEnv) open(settings any, log *slog.Logger) (sinks.Sink, error) {
	cfg := settings.(natssink.Config)
	cfg.Logger = log
	if cfg.SubjectPrefix == "" {
		log.Warn("NATS_SUBJECT_PREFIX is not set: a row's topic is the whole subject, so rows can publish to any subject the relay's user may (only $… and _INBOX subjects are refused); set NATS_SUBJECT_PREFIX, or limit the user's publish permissions", "sink", "nats")
	}
	return natssink.New(cfg)
}
