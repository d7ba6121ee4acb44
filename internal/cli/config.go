package cli

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
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/console"
)

// config is the whole configuration, read from the environment only. Each
// field's doc tag is its line in `outbox-relay help` and in the
// configuration reference, docs/configuration.md (a test keeps the two in
// step); allowed says what values are accepted; redact, when set, says why
// the value is never shown in an error; emptyOK lets an empty value
// override the default (an empty RELAY_HTTP_ADDR disables the endpoint).
// In doc and allowed, {sink timeouts} stands for the list of every sink's
// timeout variable (expandTag). Each sink's variables are in its own
// struct, in its own file (sink_*.go), held in sinks.
type config struct {
	DatabaseURL string `env:"DATABASE_URL" redact:"may hold a password" doc:"PostgreSQL connection string (pgx: URL or key=value). Required by every command but version, help and migrate --print. The relay's connections name themselves outbox-relay (application_name) unless it names them otherwise, and run SET jit = off after connecting: its statements read a few rows by index, and JIT compiled each one for up to seconds once the planner's estimates grew with the table." allowed:"a PostgreSQL connection string"`
	Schema      string `env:"RELAY_SCHEMA" envDefault:"outbox" doc:"Schema of the relay's tables; every statement is qualified with it." allowed:"a lower-case identifier: letters, digits, underscores, not starting with a digit, at most 63 characters"`
	Schemas     string `env:"RELAY_SCHEMAS" doc:"Several outbox schemas of the database, served by one relay: each keeps its own mode, relays, buckets and dead letters, and its metrics carry a schema label. Replaces RELAY_SCHEMA (set one of them). docs/many-outboxes.md has the details." allowed:"a comma-separated list of lower-case identifiers, like orders,billing"`
	SchemaMatch string `env:"RELAY_SCHEMA_MATCH" doc:"Serve every schema whose name matches this LIKE pattern and holds a migrated outbox, found again every RELAY_DISCOVER_INTERVAL: a new tenant's schema is served without a restart, a dropped one is let go. With RELAY_SCHEMAS, both are served. Schemas are never created from it: migrate each with outbox-relay migrate --schema." allowed:"a LIKE pattern (% any run, _ one character, \\ escapes), like tenant\\_%"`

	// SchemaOwners is who may own the schemas SchemaMatch finds
	// (fleet.Trust).
	SchemaOwners string `env:"RELAY_SCHEMA_OWNERS" doc:"The roles trusted to own the schemas RELAY_SCHEMA_MATCH finds: a matching schema is served only when both it and its messages table are owned by one of them, because a schema's owner can act as the relay's role (its triggers run as the role that writes to its tables). A matching schema owned by another role is not served, and a warning names it and its owner, once. Default: the role the relay connects as and the owners of the schemas RELAY_SCHEMAS lists (docs/security.md, Schemas found by a pattern)." allowed:"a comma-separated list of role names, like app_owner,tenants_admin; only with RELAY_SCHEMA_MATCH"`

	TenantsFile string `env:"RELAY_TENANTS_FILE" doc:"A YAML file listing the outboxes of several databases (docs/many-outboxes.md): tenants: [{name, database_url or database_url_file, schemas and/or schema_match, schema_owners, mode}], with ${VAR} taken from the environment. Tenants sharing a database share one pool; sinks stay shared, from the environment. Replaces DATABASE_URL, RELAY_SCHEMA, RELAY_SCHEMAS, RELAY_SCHEMA_MATCH and RELAY_SCHEMA_OWNERS." allowed:"the path of a readable YAML file of at most 1 MiB"`
	Migrate     bool   `env:"RELAY_MIGRATE" envDefault:"true" doc:"Apply pending migrations at start, under an advisory lock (safe with several replicas). false: check the schema version and refuse to start when it is behind." allowed:"true or false"`
	Sink        string `env:"RELAY_SINK" doc:"Sink for rows whose destination is null. Defaults to the only configured sink; required when several are configured." allowed:"the name of a configured sink"`
	ID          string `env:"RELAY_ID" doc:"This relay's name in leases (leased_by) and logs. Default: hostname-pid." allowed:"up to 200 characters"`

	BatchSize        int           `env:"RELAY_BATCH_SIZE" envDefault:"1000" doc:"Rows per claim." allowed:"an integer from 1 to 100000"`
	MaxInFlight      int           `env:"RELAY_MAX_IN_FLIGHT" doc:"Rows claimed and not yet settled, per sink, before claiming pauses. Default: 4 × RELAY_BATCH_SIZE." allowed:"an integer of at least RELAY_BATCH_SIZE"`
	MaxInFlightBytes int64         `env:"RELAY_MAX_IN_FLIGHT_BYTES" envDefault:"67108864" doc:"Payload bytes of the rows claimed and not yet settled, over all sinks, before claiming pauses: the relay's memory follows it whatever the payload sizes. A row whose payload is larger is dead-lettered as permanent without its payload being read, naming this variable. Default 64 MiB." allowed:"an integer number of bytes of at least 65536"`
	MaxPayloadBytes  int64         `env:"RELAY_MAX_PAYLOAD_BYTES" doc:"When set, the most bytes of a row's payload: applied to the table with the migrations (RELAY_MIGRATE=true or outbox-relay migrate) as an insert trigger that refuses a larger payload in the producer's own transaction, naming the limit; a larger payload already in the table is dead-lettered as permanent without being read. Unset or 0: no limit at insert (a limit set before stays), and payloads over RELAY_MAX_IN_FLIGHT_BYTES are dead-lettered unread." allowed:"0, or an integer number of bytes from 1 to 1073741824"`
	PollInterval     time.Duration `env:"RELAY_POLL_INTERVAL" envDefault:"50ms" doc:"Pause after a claim that found nothing (±20% jitter); a tenth of it after a claim that found some rows (and, for one claim loop, after an empty claim within four tenths of it of the last rows found; in partitioned mode within all of it, the pause growing with more than three relays), so a steady stream is not held up, the two claim loops taking turns (one claims a twentieth after the other); none after a full batch. An idle relay delivers within about this long of the commit." allowed:"a duration from 1ms to 1m, like 50ms"`
	Lease            time.Duration `env:"RELAY_LEASE" envDefault:"30s" doc:"How long a claim holds its rows. Deliveries are cut off at 80% of it, and a request that could not finish by then is not started; an expired lease makes the rows claimable again." allowed:"a duration of at least 2s and at least 5/3 of every sink timeout ({sink timeouts})"`
	Ordered          bool          `env:"RELAY_ORDERED" envDefault:"false" doc:"The alias of RELAY_MODE=ordered, kept for the configurations that set it. Per-key FIFO: at most one message per key at a destination at a time across all relays (a key's queued rows are claimed together and each is sent once the one before it is acknowledged), each key delivered in insert (id) order; a failing message, its Retry-After included, holds up its own key only (until delivered or dead-lettered). Rows without a key are never held up. Every relay on a schema must run the same mode: one that disagrees with the relays alive refuses to start." allowed:"true or false"`
	Mode             string        `env:"RELAY_MODE" doc:"Delivery mode. unordered (the default): every relay claims any due row (SELECT … FOR UPDATE SKIP LOCKED). ordered: the same as RELAY_ORDERED=true. partitioned: the relays share 64 buckets (a row's bucket follows from its key, or its id when it has none), each bucket owned by one relay at a time, which alone claims and settles its rows, in per-key order, each key's next event sent as soon as the previous one is acknowledged; for many replicas and bursts on one timestamp (see docs/when-to-graduate.md). Every relay on a schema must run the same mode and, in partitioned mode, the same RELAY_LEASE." allowed:"unordered, ordered or partitioned; unordered and partitioned are refused with RELAY_ORDERED=true"`
	Notify           bool          `env:"RELAY_NOTIFY" envDefault:"false" doc:"Wake the relay when a row is inserted instead of waiting for its next poll: the relay LISTENs on a dedicated connection, and while it is alive every inserting statement sends one NOTIFY. Opt-in because NOTIFY serializes committing transactions (docs/benchmarks.md has the measured cost); polling goes on, and takes over alone behind a transaction-pooling PgBouncer, where notifications cannot arrive (a warning says so)." allowed:"true or false"`
	MaxAttempts      int           `env:"RELAY_MAX_ATTEMPTS" envDefault:"25" doc:"Deliveries of a row before it goes to the dead letters." allowed:"an integer from 1 to 1000"`
	BackoffMin       time.Duration `env:"RELAY_BACKOFF_MIN" envDefault:"1s" doc:"Retry delay after the first failure; it doubles with every attempt (±20% jitter)." allowed:"a positive duration"`
	BackoffMax       time.Duration `env:"RELAY_BACKOFF_MAX" envDefault:"1h" doc:"Longest retry delay." allowed:"a duration of at least RELAY_BACKOFF_MIN"`
	DrainTimeout     time.Duration `env:"RELAY_DRAIN_TIMEOUT" envDefault:"10s" doc:"At SIGTERM, how long in-flight deliveries may finish; then they are released for the next relay." allowed:"a duration of 0 or more"`
	ArchiveRetention time.Duration `env:"RELAY_ARCHIVE_RETENTION" envDefault:"168h" doc:"How long delivered rows stay in the archive table, at least: retention drops whole partitions of a quarter of it, so a row goes at most a quarter later. 0 keeps them forever." allowed:"a duration of 0 or more, like 168h"`
	HotRotation      time.Duration `env:"RELAY_HOT_ROTATION" envDefault:"1m" doc:"How long each generation of the hot table (messages) stays current before the relay rotates it: rows go on into a new table, and a drained generation is emptied with TRUNCATE, so that a pinned MVCC horizon cannot grow the table. While a transaction older than the current generation holds the horizon, generations turn every quarter of it (at least 1s). A producer's insert waits behind a rotation at most 50 ms. 0 turns rotation off." allowed:"a duration of 0 or more, like 1m"`
	DedupRetention   time.Duration `env:"RELAY_DEDUP_RETENTION" envDefault:"168h" doc:"How long delivered idempotency keys are remembered, at least (forgotten at most half of it later: whole partitions are dropped): a row inserted again with such a key is archived as a duplicate, not sent. 0 keeps them forever." allowed:"a duration of 0 or more, like 168h"`
	CloudEvents      string        `env:"RELAY_CLOUDEVENTS_SOURCE" doc:"When set, every message also carries CloudEvents 1.0 binary-mode headers: ce-specversion, ce-id (the idempotency key), ce-type (the topic), ce-source (this value) and ce-time (created_at). Headers a row sets itself are kept." allowed:"a URI reference, like /orders-service or https://example.com/orders"`
	DiscoverInterval time.Duration `env:"RELAY_DISCOVER_INTERVAL" envDefault:"10s" doc:"How often the schemas matching RELAY_SCHEMA_MATCH (or a tenant's schema_match) are looked for again." allowed:"a duration from 1s to 30s"`
	IdlePollInterval time.Duration `env:"RELAY_IDLE_POLL_INTERVAL" doc:"Longest pause between the claims of an outbox that keeps finding nothing: the pause after an empty claim doubles from RELAY_POLL_INTERVAL up to this, so idle outboxes cost the database little; with RELAY_NOTIFY working, up to ten times this (an insert wakes the relay at once). Default: RELAY_POLL_INTERVAL (no backoff) when the relay serves one outbox, 1s when it serves several." allowed:"a duration from RELAY_POLL_INTERVAL to 1m"`
	ReadyWhen        string        `env:"RELAY_READY_WHEN" envDefault:"all" doc:"When a relay serving several outboxes answers 200 on /readyz: all, while every outbox can do its work; any, while at least one can (or none is served). The 503's body names the outboxes that cannot." allowed:"all or any"`
	HTTPAddr         string        `env:"RELAY_HTTP_ADDR" envDefault:":8461" emptyOK:"true" doc:"Listen address of /metrics, /livez and /readyz. Empty disables the endpoint. The default port is one no common tool uses (9090 is Prometheus's own, and the exporters' range 9100-9999 is taken); it is bound before anything else, so a conflict stops the relay before it touches the schema." allowed:"host:port, like :8461 or 127.0.0.1:0, or empty"`

	// HTTPMaxConnections caps the endpoint's connections; its timeouts
	// are fixed (endpoint.go).
	HTTPMaxConnections int `env:"RELAY_HTTP_MAX_CONNECTIONS" envDefault:"256" doc:"Connections the endpoint (RELAY_HTTP_ADDR) holds open at once. At the cap, a new connection closes the one that has waited longest without a request (an idle keep-alive connection, or one that has sent nothing yet) and takes its place; while every one is in a request, the new one is closed at once: nothing waits in line, and a request in progress is never cut. With the endpoint's timeouts (docs/security.md, Endpoints), it bounds the memory clients can make the endpoint hold." allowed:"an integer from 1 to 65536"`

	// Console and ConsoleSecret are the web console's (docs/console.md).
	Console       bool   `env:"RELAY_CONSOLE" envDefault:"false" doc:"Serve the web console (docs/console.md) under /console/ on RELAY_HTTP_ADDR: every outbox at a glance, dead letters by cause, a key's history, who holds the horizon. It shows payload previews to whoever reaches the port: keep RELAY_HTTP_ADDR on loopback and port-forward, or put an authenticating proxy in front. outbox-relay console serves the same pages without a relay." allowed:"true or false"`
	ConsoleSecret string `env:"RELAY_CONSOLE_SECRET" redact:"a secret" doc:"Turns the console's actions on (retry and purge dead letters, cancel a key's pending rows): an operator signs in by typing it. Unset, the console is read-only and refuses every action. Prefer RELAY_CONSOLE_SECRET_FILE." allowed:"at least 16 bytes, like the output of openssl rand -base64 24"`

	// sinks holds the variables of each sink of sinkKinds, in its order
	// (newSinkEnvs): loadConfig reads each, and configFields lists them
	// here, in the order of the reference.
	sinks []sinkEnv

	Tracing tracingEnv

	LogLevel  string `env:"LOG_LEVEL" envDefault:"info" doc:"Log level." allowed:"debug, info, warn or error"`
	LogFormat string `env:"LOG_FORMAT" envDefault:"auto" doc:"Log format: auto is colored text on a terminal and JSON otherwise." allowed:"auto, text or json"`
}

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
// variable, the value (unless it may hold a secret) and what is allowed.
func loadConfig(environ []string) (config, error) {
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	if err := readSecretFiles(vars); err != nil {
		return config{}, err
	}
	c := config{sinks: newSinkEnvs()}
	if err := c.parse(vars); err != nil {
		return c, err
	}
	// The env library gives an empty variable its default; where empty
	// means something (off), honour it.
	for _, f := range configFields() {
		if v, set := vars[f.name]; set && v == "" && f.field.Tag.Get("emptyOK") == "true" {
			f.value(&c).SetString("")
		}
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	return c, c.validateOutboxes(vars["RELAY_SCHEMA"] != "")
}

// fileSuffix names a secret's twin: DATABASE_URL_FILE holds the path of a
// file whose content is DATABASE_URL, as Docker and Kubernetes mount
// secrets.
const fileSuffix = "_FILE"

// readSecretFiles replaces, in vars, every secret variable's _FILE twin by
// the content of the file it names (without a final line break): a regular
// file, or a link to one, of at most secretFileLimit bytes. Setting a
// secret and its twin is an error naming both.
func readSecretFiles(vars map[string]string) error {
	for _, f := range configFields() {
		if f.field.Tag.Get("redact") == "" {
			continue
		}
		twin := f.name + fileSuffix
		path, ok := vars[twin]
		if !ok || path == "" {
			continue
		}
		if vars[f.name] != "" {
			return &configError{Var: twin, Value: path, Reason: "set together with " + f.name + ": set one of them",
				Allowed: "the path of a file holding " + f.name + ", with " + f.name + " unset"}
		}
		b, err := readFileLimited(path, secretFileLimit)
		switch {
		case errors.Is(err, errFileNotRegular), errors.Is(err, errFileTooLarge):
			return &configError{Var: twin, Value: path, Reason: err.Error(),
				Allowed: "the path of a regular file (or a link to one) of at most " + formatLimit(secretFileLimit) + " holding " + f.name}
		case err != nil:
			reason := err.Error()
			if inner := errors.Unwrap(err); inner != nil {
				reason = inner.Error()
			}
			return &configError{Var: twin, Value: path, Reason: "cannot read it: " + reason,
				Allowed: "the path of a readable file holding " + f.name}
		}
		vars[f.name] = strings.TrimRight(string(b), "\r\n")
		if vars[f.name] == "" {
			return &configError{Var: twin, Value: path, Reason: "the file is empty", Allowed: "the path of a file holding " + f.name}
		}
	}
	return nil
}

// configVar is one environment variable of config: its field and where the
// field sits, in config's (nested) struct or in a sink's.
type configVar struct {
	name  string
	field reflect.StructField
	// sink is the index of the sink (in sinkKinds and config.sinks) whose
	// struct holds the field, or -1 for config's own.
	sink  int
	index []int
}

// value returns the field of c that holds the variable.
func (v configVar) value(c *config) reflect.Value {
	if v.sink >= 0 {
		return reflect.ValueOf(c.sinks[v.sink]).Elem().FieldByIndex(v.index)
	}
	return reflect.ValueOf(c).Elem().FieldByIndex(v.index)
}

// doc and allowed return the variable's doc and allowed tags, expanded.
func (v configVar) doc() string     { return expandTag(v.field.Tag.Get("doc")) }
func (v configVar) allowed() string { return expandTag(v.field.Tag.Get("allowed")) }

// expandTag replaces, in a doc or allowed tag, what stands for a list of
// the sinks' variables: {sink timeouts} is every sink's timeout variable
// (NATS_ACK_TIMEOUT, WEBHOOK_TIMEOUT, …).
func expandTag(s string) string {
	return strings.ReplaceAll(s, "{sink timeouts}", strings.Join(sinkTimeouts(), ", "))
}

// configFields lists config's variables in the order of the reference,
// descending into its nested structs and, where config holds the sinks,
// into each sink's struct.
func configFields() []configVar {
	var out []configVar
	var walk func(t reflect.Type, sink int, index []int)
	walk = func(t reflect.Type, sink int, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			idx := append(slices.Clone(index), i)
			switch {
			case f.Tag.Get("env") != "":
				out = append(out, configVar{name: f.Tag.Get("env"), field: f, sink: sink, index: idx})
			case f.Type == reflect.TypeFor[[]sinkEnv]():
				for s, k := range sinkKinds {
					walk(reflect.TypeOf(k.env()).Elem(), s, nil)
				}
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, sink, idx)
			}
		}
	}
	walk(reflect.TypeFor[config](), -1, nil)
	return out
}

// configField returns the variable called name; it panics for a name no
// field has, which is a programming error.
func configField(name string) configVar {
	for _, f := range configFields() {
		if f.name == name {
			return f
		}
	}
	panic("config has no variable " + name)
}

// parse reads vars into c's fields and each of its sinks' with
// caarlos0/env. Of values that cannot be parsed, the error names the
// first in the order of the reference.
func (c *config) parse(vars map[string]string) error {
	opts := env.Options{Environment: vars}
	fields := configFields()
	var first error
	firstAt := len(fields)
	try := func(part any, sink int) {
		err := env.ParseWithOptions(part, opts)
		if err == nil {
			return
		}
		at, err := explainParseError(err, vars, fields, sink)
		if first == nil || at < firstAt {
			first, firstAt = err, at
		}
	}
	try(c, -1)
	for i, e := range c.sinks {
		try(e, i)
	}
	return first
}

// explainParseError turns the first error of caarlos0/env, parsing
// config's own fields (sink -1) or a sink's, into a configError, returned
// with the position of its variable in fields (len(fields) when it names
// none).
func explainParseError(err error, vars map[string]string, fields []configVar, sink int) (int, error) {
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
	}
	var pe env.ParseError
	if errors.As(err, &pe) {
		for at, f := range fields {
			if f.sink != sink || f.field.Name != pe.Name {
				continue
			}
			value := vars[f.name]
			if r := f.field.Tag.Get("redact"); r != "" {
				value = "(not shown: " + r + ")"
			}
			return at, &configError{Var: f.name, Value: value, Allowed: f.allowed(), Reason: "not a valid " + kindOf(f.field.Type)}
		}
	}
	return len(fields), fmt.Errorf("read configuration: %w", err)
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

// refuse returns a configError for the variable name with its value (or why
// the value is not shown), what is allowed, and reason.
func (c *config) refuse(name, reason string) error {
	f := configField(name)
	value := fmt.Sprint(f.value(c).Interface())
	if r := f.field.Tag.Get("redact"); r != "" {
		value = "(not shown: " + r + ")"
	}
	return &configError{Var: name, Value: value, Allowed: f.allowed(), Reason: reason}
}

// validate checks every value that needs no connection. Requirements that
// depend on the command (DATABASE_URL, a sink) are checked by requireDatabase
// and requireSinks.
func (c *config) validate() error {
	if err := outbox.ValidateSchema(c.Schema); err != nil {
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
	case c.MaxInFlightBytes < 65536:
		return c.refuse("RELAY_MAX_IN_FLIGHT_BYTES", "too small")
	case c.MaxPayloadBytes < 0 || c.MaxPayloadBytes > migrations.PayloadLimitMax:
		return c.refuse("RELAY_MAX_PAYLOAD_BYTES", "out of range")
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
	case c.HotRotation < 0:
		return c.refuse("RELAY_HOT_ROTATION", "negative")
	case c.HotRotation > 0 && c.HotRotation < time.Second:
		return c.refuse("RELAY_HOT_ROTATION", "under a second")
	}
	if c.Mode != "" && !slices.Contains(outbox.Modes, outbox.Mode(c.Mode)) {
		return c.refuse("RELAY_MODE", "unknown mode")
	}
	if c.Ordered && c.Mode != "" && outbox.Mode(c.Mode) != outbox.ModeOrdered {
		return c.refuse("RELAY_MODE", "RELAY_ORDERED=true asks for ordered mode")
	}
	if c.CloudEvents != "" {
		if u, err := url.Parse(c.CloudEvents); err != nil || strings.ContainsAny(c.CloudEvents, " \t\r\n") || u.String() == "" {
			return c.refuse("RELAY_CLOUDEVENTS_SOURCE", "not a URI reference")
		}
	}
	if c.HTTPMaxConnections < 1 || c.HTTPMaxConnections > 65536 {
		return c.refuse("RELAY_HTTP_MAX_CONNECTIONS", "out of range")
	}
	if c.HTTPAddr != "" {
		if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return c.refuse("RELAY_HTTP_ADDR", "not host:port")
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return c.refuse("RELAY_HTTP_ADDR", "bad port")
		}
	}
	if c.Console && c.HTTPAddr == "" {
		return c.refuse("RELAY_CONSOLE", "the console is served on RELAY_HTTP_ADDR, which is empty")
	}
	if c.ConsoleSecret != "" && len(c.ConsoleSecret) < console.MinSecretLength {
		return c.refuse("RELAY_CONSOLE_SECRET", fmt.Sprintf("%d bytes: too short", len(c.ConsoleSecret)))
	}
	if err := c.checkFileVars(); err != nil {
		return err
	}
	if err := c.validateSinks(); err != nil {
		return err
	}
	if err := c.Tracing.validate(c); err != nil {
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
		return c.refuse("RELAY_SINK", fmt.Sprintf("no such sink is configured (configured: %s; known: %s)",
			namesOrNone(c.sinkNames()), strings.Join(knownSinks(), ", ")))
	}
	return nil
}

// requireDatabase checks DATABASE_URL for commands that use the database.
func (c *config) requireDatabase() error {
	if c.TenantsFile != "" {
		return nil // the file names the databases (readTenantsFile checks them)
	}
	if c.DatabaseURL == "" {
		return &configError{Var: "DATABASE_URL", Allowed: "a PostgreSQL connection string, like postgres://user:pass@host:5432/db"}
	}
	if err := checkDatabaseScheme(c.DatabaseURL); err != nil {
		return err
	}
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		return databaseURLError(c.DatabaseURL, err)
	}
	return nil
}

// urlScheme matches the scheme of a URL: pgx takes a connection string that
// starts with postgres:// or postgresql:// for a URL, and anything else for
// key=value pairs, so a misspelt scheme would otherwise be parsed as pairs
// and refused with a message about those.
var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// checkDatabaseScheme refuses a DATABASE_URL that is a URL with a scheme
// pgx does not take. The scheme holds no secret, so the error shows it.
func checkDatabaseScheme(dsn string) error {
	m := urlScheme.FindStringSubmatch(strings.TrimSpace(dsn))
	if m == nil || m[1] == "postgres" || m[1] == "postgresql" {
		return nil
	}
	return &configError{Var: "DATABASE_URL", Value: "(not shown: may hold a password)",
		Reason:  fmt.Sprintf("the scheme %q is not one of PostgreSQL's", m[1]+"://"),
		Allowed: "a URL starting with postgres:// or postgresql:// (lower case), or key=value pairs (host=db user=app dbname=app)"}
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

// requireSinks checks that run has somewhere to deliver to. environ is the
// process's environment: when no sink is configured, the error names the
// variables of environ that look like a sink's variable misspelt.
func (c *config) requireSinks(environ []string) error {
	names := c.sinkNames()
	switch {
	case len(names) == 0:
		return usageError{fmt.Errorf("no sink is configured: set %s%s", orList(sinkEnablers()), typoHints(environ))}
	case len(names) > 1 && c.Sink == "":
		return &configError{Var: "RELAY_SINK", Reason: "several sinks are configured, so the default for rows without a destination must be named", Allowed: strings.Join(names, " or ")}
	}
	return nil
}

// typoHints returns, for the error that no sink is configured, the unknown
// variables of environ whose closest known name enables a sink, or that
// have a sink's prefix: " (did you mean NATS_URL? NATS_ULR is set)".
func typoHints(environ []string) string {
	var hints []string
	for _, u := range unknownVariables(environ) {
		sinkVar := false
		for _, k := range sinkKinds {
			sinkVar = sinkVar || u.Closest == k.enabledBy || strings.HasPrefix(u.Name, k.prefix)
		}
		if sinkVar {
			hints = append(hints, "did you mean "+u.Closest+"? "+u.Name+" is set")
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return " (" + strings.Join(hints, "; ") + ")"
}

// leaseCovers reports whether a request that takes timeout fits in the
// lease as documented: the lease is at least 5/3 of the timeout (a timeout of
// at most 60% of it), which leaves the delivery, cut off at 80% of the lease
// (relay.DeliveryBudget), a third of the timeout to spare for the claim and
// for starting the request.
func leaseCovers(lease, timeout time.Duration) bool {
	return 5*timeout <= 3*lease
}

// forever maps the environment's 0 (keep forever) to the relay's negative.
func forever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func namesOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// orList joins s as "a, b or c".
func orList(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// mode returns the delivery mode c asks for: RELAY_MODE, or ordered when
// RELAY_ORDERED=true (its alias, kept for the configurations that use it),
// or unordered.
func (c *config) mode() outbox.Mode {
	switch {
	case c.Mode != "":
		return outbox.Mode(c.Mode)
	case c.Ordered:
		return outbox.ModeOrdered
	}
	return outbox.ModeUnordered
}
