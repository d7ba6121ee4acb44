package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// config is the whole configuration, read from the environment only. Each
// field's doc tag is its line in `outbox-relay help` and in the README's
// configuration reference (a test keeps the two in step); allowed says what
// values are accepted.
type config struct {
	DatabaseURL string `env:"DATABASE_URL" doc:"PostgreSQL connection string (pgx: URL or key=value). Required by every command but version, help and migrate --print." allowed:"a PostgreSQL connection string"`
	Schema      string `env:"RELAY_SCHEMA" envDefault:"outbox" doc:"Schema of the relay's tables; every statement is qualified with it." allowed:"a lower-case identifier: letters, digits, underscores, not starting with a digit, at most 63 characters"`
	Migrate     bool   `env:"RELAY_MIGRATE" envDefault:"true" doc:"Apply pending migrations at start, under an advisory lock (safe with several replicas). false: check the schema version and refuse to start when it is behind." allowed:"true or false"`
	Sink        string `env:"RELAY_SINK" doc:"Sink for rows whose destination is null. Defaults to the only configured sink; required when several are configured." allowed:"the name of a configured sink: nats or webhook"`
	ID          string `env:"RELAY_ID" doc:"This relay's name in leases (leased_by) and logs. Default: hostname-pid." allowed:"up to 200 characters"`

	BatchSize        int           `env:"RELAY_BATCH_SIZE" envDefault:"1000" doc:"Rows per claim." allowed:"an integer from 1 to 100000"`
	MaxInFlight      int           `env:"RELAY_MAX_IN_FLIGHT" doc:"Rows claimed and not yet settled, per sink, before claiming pauses. Default: 4 × RELAY_BATCH_SIZE." allowed:"an integer of at least RELAY_BATCH_SIZE"`
	PollInterval     time.Duration `env:"RELAY_POLL_INTERVAL" envDefault:"50ms" doc:"Pause after a claim that found nothing (±20% jitter); a tenth of it after a claim that found some rows, so a steady stream is not held up; none after a full batch. An idle relay delivers within about this long of the commit." allowed:"a duration from 1ms to 1m, like 50ms"`
	Lease            time.Duration `env:"RELAY_LEASE" envDefault:"30s" doc:"How long a claim holds its rows. Deliveries are cut off at 80% of it, and a request that could not finish by then is not started; an expired lease makes the rows claimable again." allowed:"a duration of at least 2s and at least 5/3 of every sink timeout (NATS_ACK_TIMEOUT, WEBHOOK_TIMEOUT)"`
	Ordered          bool          `env:"RELAY_ORDERED" envDefault:"false" doc:"Per-key FIFO: rows with the same key are delivered one at a time, in insert order; a failing row holds up its own key only (until delivered or dead-lettered). Rows without a key are never held up. Costs one index probe per claimed keyed row." allowed:"true or false"`
	MaxAttempts      int           `env:"RELAY_MAX_ATTEMPTS" envDefault:"25" doc:"Deliveries of a row before it goes to the dead letters." allowed:"an integer from 1 to 1000"`
	BackoffMin       time.Duration `env:"RELAY_BACKOFF_MIN" envDefault:"1s" doc:"Retry delay after the first failure; it doubles with every attempt (±20% jitter)." allowed:"a positive duration"`
	BackoffMax       time.Duration `env:"RELAY_BACKOFF_MAX" envDefault:"1h" doc:"Longest retry delay." allowed:"a duration of at least RELAY_BACKOFF_MIN"`
	DrainTimeout     time.Duration `env:"RELAY_DRAIN_TIMEOUT" envDefault:"10s" doc:"At SIGTERM, how long in-flight deliveries may finish; then they are released for the next relay." allowed:"a duration of 0 or more"`
	ArchiveRetention time.Duration `env:"RELAY_ARCHIVE_RETENTION" envDefault:"168h" doc:"How long delivered rows stay in the archive table. 0 keeps them forever." allowed:"a duration of 0 or more, like 168h"`
	DedupRetention   time.Duration `env:"RELAY_DEDUP_RETENTION" envDefault:"168h" doc:"How long delivered idempotency keys are remembered: a row inserted again with such a key is archived as a duplicate, not sent. 0 keeps them forever." allowed:"a duration of 0 or more, like 168h"`
	CloudEvents      string        `env:"RELAY_CLOUDEVENTS_SOURCE" doc:"When set, every message also carries CloudEvents 1.0 binary-mode headers: ce-specversion, ce-id (the idempotency key), ce-type (the topic), ce-source (this value) and ce-time (created_at). Headers a row sets itself are kept." allowed:"a URI reference, like /orders-service or https://example.com/orders"`
	HTTPAddr         string        `env:"RELAY_HTTP_ADDR" envDefault:":9090" doc:"Listen address of /metrics, /livez and /readyz. Empty disables the endpoint." allowed:"host:port, like :9090 or 127.0.0.1:0, or empty"`

	NatsURL           string        `env:"NATS_URL" doc:"NATS server URL(s), comma-separated; enables the nats sink. Credentials may be embedded (nats://user:pass@host:4222); they are never logged." allowed:"nats://, tls://, ws:// or wss:// URLs"`
	NatsJetStream     bool          `env:"NATS_JETSTREAM" envDefault:"true" doc:"Publish to JetStream and wait for each PubAck. false: core NATS, publish and flush (no persistence, no dedup)." allowed:"true or false"`
	NatsSubjectPrefix string        `env:"NATS_SUBJECT_PREFIX" doc:"Prepended to the topic to form the subject, like events. for events.orders.created." allowed:"empty, or subject tokens ending with a dot"`
	NatsStream        string        `env:"NATS_STREAM" doc:"When set, create this JetStream stream at start, capturing NATS_SUBJECT_PREFIX + '>' with a duplicate window of RELAY_LEASE + RELAY_BACKOFF_MAX, unless it exists (existing streams are never changed). For quick starts; manage production streams yourself." allowed:"a stream name (letters, digits, - and _); needs NATS_SUBJECT_PREFIX"`
	NatsAckTimeout    time.Duration `env:"NATS_ACK_TIMEOUT" envDefault:"5s" doc:"How long to wait for one JetStream PubAck before the message is retried." allowed:"a positive duration of at most 60% of RELAY_LEASE"`

	WebhookURL           string        `env:"WEBHOOK_URL" doc:"Enables the webhook sink: every message for it is POSTed here, signed as Standard Webhooks. Credentials and query are never logged." allowed:"an http:// or https:// URL with a host"`
	WebhookSecret        string        `env:"WEBHOOK_SECRET" doc:"Standard Webhooks signing secret(s); required with WEBHOOK_URL. Several, separated by spaces or commas, each sign every request (rotation). Never logged." allowed:"whsec_ followed by base64 of 24 to 64 bytes"`
	WebhookTimeout       time.Duration `env:"WEBHOOK_TIMEOUT" envDefault:"10s" doc:"Per request, from connecting to reading the response status." allowed:"a positive duration of at most 60% of RELAY_LEASE"`
	WebhookConcurrency   int           `env:"WEBHOOK_CONCURRENCY" envDefault:"16" doc:"Requests in flight to WEBHOOK_URL, over all batches." allowed:"an integer from 1 to 1024"`
	WebhookMaxRetryAfter time.Duration `env:"WEBHOOK_MAX_RETRY_AFTER" envDefault:"1h" doc:"Longest pause a Retry-After response header can impose on the webhook sink; longer values are cut to this." allowed:"a positive duration"`

	LogLevel  string `env:"LOG_LEVEL" envDefault:"info" doc:"Log level." allowed:"debug, info, warn or error"`
	LogFormat string `env:"LOG_FORMAT" envDefault:"auto" doc:"Log format: auto is colored text on a terminal and JSON otherwise." allowed:"auto, text or json"`
}

var streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

// configError is a configuration value that was refused.
type configError struct {
	Var     string
	Value   string
	Allowed string
	Reason  string
}

func (e *configError) Error() string {
	var b strings.Builder
	if e.Value == "" {
		fmt.Fprintf(&b, "%s is not set", e.Var)
	} else {
		fmt.Fprintf(&b, "invalid %s=%q", e.Var, e.Value)
	}
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.Allowed != "" {
		b.WriteString("; want " + e.Allowed)
	}
	return b.String()
}

// loadConfig reads the configuration from environ (KEY=value pairs) and
// validates every value, without connecting to anything. Its errors name the
// variable, the value and what is allowed.
func loadConfig(environ []string) (config, error) {
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	var c config
	if err := env.ParseWithOptions(&c, env.Options{Environment: vars}); err != nil {
		return c, explainParseError(err, vars)
	}
	return c, c.validate()
}

// explainParseError turns the first error of caarlos0/env into a configError.
func explainParseError(err error, vars map[string]string) error {
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
	}
	var pe env.ParseError
	if errors.As(err, &pe) {
		if f, ok := reflect.TypeFor[config]().FieldByName(pe.Name); ok {
			name := f.Tag.Get("env")
			reason := "not a valid " + kindOf(f.Type)
			return &configError{Var: name, Value: vars[name], Allowed: f.Tag.Get("allowed"), Reason: reason}
		}
	}
	return fmt.Errorf("read configuration: %w", err)
}

func kindOf(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration (use units: 500ms, 30s, 5m, 168h)"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() == reflect.Int:
		return "integer"
	}
	return t.String()
}

// refuse returns a configError for the field whose env tag is name.
func (c *config) refuse(name, reason string) error {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("env") == name {
			return &configError{Var: name, Value: fmt.Sprint(v.Field(i).Interface()), Allowed: t.Field(i).Tag.Get("allowed"), Reason: reason}
		}
	}
	panic("refuse: no field for " + name)
}

// validate checks every value that needs no connection. Requirements that
// depend on the command (DATABASE_URL, a sink) are checked by requireDatabase
// and requireSinks.
func (c *config) validate() error {
	if err := migrations.ValidateSchema(c.Schema); err != nil {
		return c.refuse("RELAY_SCHEMA", "")
	}
	if len(c.ID) > 200 {
		return c.refuse("RELAY_ID", "too long")
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 100000:
		return c.refuse("RELAY_BATCH_SIZE", "out of range")
	case c.MaxInFlight != 0 && c.MaxInFlight < c.BatchSize:
		return c.refuse("RELAY_MAX_IN_FLIGHT", fmt.Sprintf("below RELAY_BATCH_SIZE=%d", c.BatchSize))
	case c.PollInterval < time.Millisecond || c.PollInterval > time.Minute:
		return c.refuse("RELAY_POLL_INTERVAL", "out of range")
	case c.Lease < 2*time.Second:
		return c.refuse("RELAY_LEASE", "too short")
	case c.MaxAttempts < 1 || c.MaxAttempts > 1000:
		return c.refuse("RELAY_MAX_ATTEMPTS", "out of range")
	case c.BackoffMin <= 0:
		return c.refuse("RELAY_BACKOFF_MIN", "not positive")
	case c.BackoffMax < c.BackoffMin:
		return c.refuse("RELAY_BACKOFF_MAX", fmt.Sprintf("below RELAY_BACKOFF_MIN=%s", c.BackoffMin))
	case c.DrainTimeout < 0:
		return c.refuse("RELAY_DRAIN_TIMEOUT", "negative")
	case c.ArchiveRetention < 0:
		return c.refuse("RELAY_ARCHIVE_RETENTION", "negative")
	case c.DedupRetention < 0:
		return c.refuse("RELAY_DEDUP_RETENTION", "negative")
	}
	if c.CloudEvents != "" {
		if u, err := url.Parse(c.CloudEvents); err != nil || strings.ContainsAny(c.CloudEvents, " \t\r\n") || u.String() == "" {
			return c.refuse("RELAY_CLOUDEVENTS_SOURCE", "not a URI reference")
		}
	}
	if c.HTTPAddr != "" {
		if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return c.refuse("RELAY_HTTP_ADDR", "not host:port")
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return c.refuse("RELAY_HTTP_ADDR", "bad port")
		}
	}
	if c.NatsURL != "" {
		for u := range strings.SplitSeq(c.NatsURL, ",") {
			p, err := url.Parse(strings.TrimSpace(u))
			if err != nil || p.Host == "" {
				return &configError{Var: "NATS_URL", Value: "(not shown: may hold credentials)", Allowed: "nats://, tls://, ws:// or wss:// URLs", Reason: "not a URL"}
			}
			switch p.Scheme {
			case "nats", "tls", "ws", "wss":
			default:
				return &configError{Var: "NATS_URL", Value: "(not shown: may hold credentials)", Allowed: "nats://, tls://, ws:// or wss:// URLs", Reason: fmt.Sprintf("unsupported scheme %q", p.Scheme)}
			}
		}
	}
	if c.NatsSubjectPrefix != "" && (!strings.HasSuffix(c.NatsSubjectPrefix, ".") || strings.ContainsAny(c.NatsSubjectPrefix, " \t\r\n*>") || strings.Contains(c.NatsSubjectPrefix, "..") || strings.HasPrefix(c.NatsSubjectPrefix, ".")) {
		return c.refuse("NATS_SUBJECT_PREFIX", "")
	}
	if c.NatsStream != "" {
		switch {
		case !streamName.MatchString(c.NatsStream):
			return c.refuse("NATS_STREAM", "")
		case c.NatsSubjectPrefix == "":
			return c.refuse("NATS_STREAM", "NATS_SUBJECT_PREFIX is empty, and a stream capturing every subject would capture replies too")
		case !c.NatsJetStream:
			return c.refuse("NATS_STREAM", "NATS_JETSTREAM=false has no streams")
		}
	}
	if c.NatsAckTimeout <= 0 {
		return c.refuse("NATS_ACK_TIMEOUT", "not positive")
	}
	if c.NatsURL != "" && c.NatsJetStream && !leaseCovers(c.Lease, c.NatsAckTimeout) {
		return c.refuse("RELAY_LEASE", fmt.Sprintf("must be at least 5/3 of NATS_ACK_TIMEOUT=%s, so that a delivery fits in the lease with room to spare", c.NatsAckTimeout))
	}
	if err := c.validateWebhook(); err != nil {
		return err
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return c.refuse("LOG_LEVEL", "")
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		return c.refuse("LOG_FORMAT", "")
	}
	if c.Sink != "" && !slices.Contains(c.sinkNames(), c.Sink) {
		return c.refuse("RELAY_SINK", fmt.Sprintf("no such sink is configured (configured: %s)", namesOrNone(c.sinkNames())))
	}
	return nil
}

// validateWebhook checks the webhook settings. The URL and the secrets are
// never repeated in an error: they may hold credentials.
func (c *config) validateWebhook() error {
	switch {
	case c.WebhookTimeout <= 0:
		return c.refuse("WEBHOOK_TIMEOUT", "not positive")
	case c.WebhookConcurrency < 1 || c.WebhookConcurrency > webhook.ConcurrencyMax:
		return c.refuse("WEBHOOK_CONCURRENCY", "out of range")
	case c.WebhookMaxRetryAfter <= 0:
		return c.refuse("WEBHOOK_MAX_RETRY_AFTER", "not positive")
	}
	if c.WebhookURL == "" {
		if c.WebhookSecret != "" {
			return &configError{Var: "WEBHOOK_SECRET", Value: "(not shown: secret)", Reason: "set without WEBHOOK_URL"}
		}
		return nil
	}
	if err := webhook.ValidateURL(c.WebhookURL); err != nil {
		return &configError{Var: "WEBHOOK_URL", Value: "(not shown: may hold credentials)", Reason: err.Error(), Allowed: "an http:// or https:// URL with a host"}
	}
	if c.WebhookSecret == "" {
		return &configError{Var: "WEBHOOK_SECRET", Reason: "required with WEBHOOK_URL: every request is signed", Allowed: "whsec_ followed by base64 of 24 to 64 bytes; several separated by spaces or commas"}
	}
	if _, err := webhook.ParseSecrets(c.WebhookSecret); err != nil {
		return &configError{Var: "WEBHOOK_SECRET", Value: "(not shown: secret)", Reason: err.Error(), Allowed: "whsec_ followed by base64 of 24 to 64 bytes; several separated by spaces or commas"}
	}
	if !leaseCovers(c.Lease, c.WebhookTimeout) {
		return c.refuse("RELAY_LEASE", fmt.Sprintf("must be at least 5/3 of WEBHOOK_TIMEOUT=%s, so that a delivery fits in the lease with room to spare", c.WebhookTimeout))
	}
	return nil
}

// requireDatabase checks DATABASE_URL for commands that use the database.
func (c *config) requireDatabase() error {
	if c.DatabaseURL == "" {
		return &configError{Var: "DATABASE_URL", Allowed: "a PostgreSQL connection string, like postgres://user:pass@host:5432/db"}
	}
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		return databaseURLError(c.DatabaseURL, err)
	}
	return nil
}

// databaseURLError explains a DATABASE_URL that pgx cannot parse. pgx hides
// the password in its messages when it can find it; when any part of the
// value that may be a password shows up anyway, the message is left out.
func databaseURLError(dsn string, err error) error {
	reason := err.Error()
	for _, secret := range passwordCandidates(dsn) {
		if strings.Contains(reason, secret) {
			reason = "cannot be parsed (the parser's message is not shown: it repeats the password)"
			break
		}
	}
	return &configError{Var: "DATABASE_URL", Value: "(not shown: may hold a password)", Reason: reason,
		Allowed: "a PostgreSQL connection string: postgres://user:password@host:5432/db or key=value pairs"}
}

// passwordCandidates returns what may be the password in a connection
// string, URL or key=value, however malformed.
func passwordCandidates(dsn string) []string {
	var out []string
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pass, ok := strings.Cut(rest[:at], ":"); ok && pass != "" {
				out = append(out, pass)
			}
		}
	}
	for _, m := range passwordKV.FindAllStringSubmatch(dsn, -1) {
		if v := strings.Trim(m[1], `'"`); v != "" {
			out = append(out, v)
		}
	}
	return out
}

var passwordKV = regexp.MustCompile(`(?i)password\s*=\s*('[^']*'|"[^"]*"|\S+)`)

// requireSinks checks that run has somewhere to deliver to.
func (c *config) requireSinks() error {
	names := c.sinkNames()
	switch {
	case len(names) == 0:
		return errors.New("no sink is configured: set NATS_URL or WEBHOOK_URL")
	case len(names) > 1 && c.Sink == "":
		return &configError{Var: "RELAY_SINK", Reason: "several sinks are configured, so the default for rows without a destination must be named", Allowed: strings.Join(names, " or ")}
	}
	return nil
}

// sinkNames lists the configured sinks.
func (c *config) sinkNames() []string {
	var names []string
	if c.NatsURL != "" {
		names = append(names, "nats")
	}
	if c.WebhookURL != "" {
		names = append(names, "webhook")
	}
	return names
}

// leaseCovers reports whether a request that takes timeout fits in the part
// of the lease given to deliveries, with room to spare for the claim and for
// starting it: a sink starts no request that could outlast the lease, so a
// timeout equal to the budget would never start one. In practice: timeout at
// most 60% of the lease.
func leaseCovers(lease, timeout time.Duration) bool {
	budget := relay.DeliveryBudget(lease)
	return timeout <= budget-max(time.Second, budget/4)
}

func namesOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
