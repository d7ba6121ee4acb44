// Package redis delivers outbox messages to Redis Streams with go-redis.
//
// Each row becomes one stream entry, appended with XADD (entry id *) to the
// stream named StreamPrefix followed by the row's topic. A batch's XADDs
// go out in one pipeline, on one connection, in the batch's order: Redis
// runs them in that order, so the rows of one key stay in order within a
// batch, and the relay's ordered and partitioned modes keep them in order
// across batches and relays. Each XADD's reply is its row's outcome: an
// entry id is a delivery.
//
// An entry's fields are payload (the payload, byte for byte),
// idempotency_key, topic, key (only when the row has one), and one field
// header:<name> per row header, in the order of their names. Redis Streams
// drop no duplicates: after a lost reply, a restart or a lease takeover an
// entry can be appended twice, both copies with the same idempotency_key,
// and consumers drop the second.
//
// An entry Redis can never take (a stream name that is not printable or
// too long, an entry larger than MaxMessageBytes, a key that holds another
// type than a stream) is a permanent failure. A lost connection, a
// timeout, and a server that is loading, busy, out of memory, read-only or
// refusing the credentials are transient; the client dials again by
// itself, and while Redis does not answer PING the sink reports itself
// unavailable.
package redis

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.opentelemetry.io/otel/attribute"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Defaults and bounds of Config.
const (
	TimeoutDefault         = 10 * time.Second
	MaxMessageBytesDefault = 1 << 20
	// MaxMessageBytesMin and MaxMessageBytesMax bound MaxMessageBytes:
	// Redis refuses a bulk string over its proto-max-bulk-len, 512 MiB by
	// default, by closing the connection.
	MaxMessageBytesMin = 1024
	MaxMessageBytesMax = 512 << 20
)

// Config configures a Sink.
type Config struct {
	// URL is the server's address (REDIS_URL): redis://[user:password@]host[:port][/db]
	// or rediss:// for TLS. It takes no query parameters.
	URL string
	// Username and Password authenticate as a Redis ACL user
	// (REDIS_USERNAME, REDIS_PASSWORD); they replace the URL's. A password
	// without a user name authenticates as the default user.
	Username string
	Password Password
	// StreamPrefix is prepended to every topic to name its stream
	// (REDIS_STREAM_PREFIX). At most StreamPrefixBytesMax bytes.
	StreamPrefix string
	// MaxLen, when positive, trims each stream to about that many entries
	// on every XADD (MAXLEN ~ MaxLen): Redis trims whole nodes only, so a
	// stream keeps a little more (REDIS_MAXLEN). 0 trims nothing.
	MaxLen int64
	// Timeout bounds one batch's round trip (REDIS_TIMEOUT), a Deliver
	// whose context has no deadline, and every read and write on a
	// connection. At least a second; default TimeoutDefault.
	Timeout time.Duration
	// MaxMessageBytes is the largest entry the sink appends, counting every
	// field's name and value (REDIS_MAX_MESSAGE_BYTES); a larger one fails
	// permanently before it is sent. Default MaxMessageBytesDefault.
	MaxMessageBytes int
	// TLSCAFile, TLSCertFile and TLSKeyFile are PEM files for rediss://: the
	// CAs that verify the server (default: the system's), and a client
	// certificate with its key.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger
}

// Password is a secret that prints, formats and logs as redacted.
type Password string

// String returns "(redacted)".
func (Password) String() string { return "(redacted)" }

// GoString returns a redacted Go syntax.
func (Password) GoString() string { return "redis.Password(redacted)" }

// LogValue keeps the password out of logs.
func (Password) LogValue() slog.Value { return slog.StringValue("(redacted)") }

// MarshalText keeps the password out of JSON and YAML.
func (Password) MarshalText() ([]byte, error) { return []byte("(redacted)"), nil }

// Sink appends to Redis streams. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	cl     *goredis.Client
	log    *slog.Logger
	health *health
	// addr is host:port, for logs and traces.
	addr string

	stop    context.CancelFunc
	watched chan struct{} // closed when watch returns
	closing sync.Once
	// traceAttrs are TraceAttributes' answer.
	traceAttrs []attribute.KeyValue
}

var (
	_ sinks.Sink           = (*Sink)(nil)
	_ sinks.Availability   = (*Sink)(nil)
	_ sinks.StartupChecker = (*Sink)(nil)
	_ io.Closer            = (*Sink)(nil)
)

// ParseURL checks raw as Config.URL takes it and returns its options. Its
// errors never repeat the URL, which may hold a password.
func ParseURL(raw string) (*goredis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, errors.New("not a URL with a host")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("unsupported scheme %q: want redis:// or rediss://", u.Scheme)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("query parameters are not taken: set the REDIS_ variables instead")
	}
	opts, err := goredis.ParseURL(raw)
	if err != nil {
		// Its message may quote the URL's parts; say only what is wrong.
		return nil, errors.New("not a valid Redis URL (a bad port, a database that is not a number, or reserved characters in the user name or password that are not percent-encoded)")
	}
	return opts, nil
}

// New returns a sink appending to the server cfg names. It does not wait
// for the server: a background probe PINGs it, and the sink reports itself
// unavailable until it answers.
func New(cfg Config) (*Sink, error) {
	opts, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("new Redis sink: REDIS_URL: %w", err)
	}
	if err := ValidateStreamPrefix(cfg.StreamPrefix); err != nil {
		return nil, fmt.Errorf("new Redis sink: stream prefix: %w", err)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	if cfg.Timeout < time.Second {
		return nil, fmt.Errorf("new Redis sink: timeout %s is shorter than a second", cfg.Timeout)
	}
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, MaxMessageBytesDefault)
	if cfg.MaxMessageBytes < MaxMessageBytesMin || cfg.MaxMessageBytes > MaxMessageBytesMax {
		return nil, fmt.Errorf("new Redis sink: max message bytes %d out of range [%d, %d]", cfg.MaxMessageBytes, MaxMessageBytesMin, MaxMessageBytesMax)
	}
	if cfg.MaxLen < 0 {
		return nil, fmt.Errorf("new Redis sink: negative MAXLEN %d", cfg.MaxLen)
	}
	if opts.TLSConfig == nil && (cfg.TLSCAFile != "" || cfg.TLSCertFile != "" || cfg.TLSKeyFile != "") {
		return nil, errors.New("new Redis sink: TLS files need a rediss:// URL")
	}
	if opts.TLSConfig != nil {
		if err := configureTLS(opts.TLSConfig, cfg); err != nil {
			return nil, fmt.Errorf("new Redis sink: TLS: %w", err)
		}
	}
	if cfg.Username != "" {
		opts.Username = cfg.Username
	}
	if cfg.Password != "" {
		opts.Password = string(cfg.Password)
	}
	// RESP2 and AUTH: every Redis since 6 and every proxy speak it, and the
	// relay's user needs no right beyond XADD and PING (HELLO, CLIENT
	// SETNAME, CLIENT SETINFO and maintenance notifications are left out).
	opts.ClientName = ""
	opts.Protocol = 2
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// The relay retries, with backoff and attempts counted: a pipeline
	// re-sent by the client would append its entries again, unseen.
	opts.MaxRetries = -1
	opts.DialTimeout = min(cfg.Timeout, 5*time.Second)
	opts.DialerRetries = 1
	opts.ReadTimeout = cfg.Timeout
	opts.WriteTimeout = cfg.Timeout
	opts.ContextTimeoutEnabled = true
	opts.PoolTimeout = cfg.Timeout

	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("sink", "redis", "addr", opts.Addr)
	clientLog.Do(func() { goredis.SetLogger(clientLogger{log}) })
	s := &Sink{
		cfg:        cfg,
		cl:         goredis.NewClient(opts),
		log:        log,
		health:     newHealth(),
		addr:       opts.Addr,
		watched:    make(chan struct{}),
		traceAttrs: traceAttributes(opts.Addr),
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.watch(ctx)
	return s, nil
}

// configureTLS sets the CA bundle and the client certificate of cfg on c,
// which ParseURL made for rediss:// with the host as server name.
func configureTLS(c *tls.Config, cfg Config) error {
	c.MinVersion = tls.VersionTLS12
	if cfg.TLSCAFile != "" {
		pool, err := sinks.LoadCAFile(cfg.TLSCAFile)
		if err != nil {
			return err
		}
		c.RootCAs = pool
	}
	switch {
	case cfg.TLSCertFile != "" && cfg.TLSKeyFile != "":
		cert, err := sinks.LoadClientCert(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return err
		}
		c.Certificates = []tls.Certificate{cert}
	case cfg.TLSCertFile != "" || cfg.TLSKeyFile != "":
		return errors.New("a client certificate needs both its certificate and its key file")
	}
	return nil
}

// Deliver appends msgs, each to its stream, in one pipeline, and reports
// one outcome per message.
func (s *Sink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	if err := s.Available(); err != nil {
		return sinks.Fill(errs, err)
	}
	if err := ctx.Err(); err != nil {
		return sinks.Fill(errs, fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	pipe := s.cl.Pipeline()
	sent := make([]int, 0, len(msgs))
	cmds := make([]*goredis.StringCmd, 0, len(msgs))
	for i := range msgs {
		args, err := s.entry(&msgs[i])
		if err != nil {
			errs[i] = err
			continue
		}
		sent = append(sent, i)
		cmds = append(cmds, pipe.XAdd(ctx, args))
	}
	if len(cmds) == 0 {
		return errs
	}
	// Exec returns the first command's error; each command holds its own.
	_, _ = pipe.Exec(ctx)
	lost := false
	for j, cmd := range cmds {
		i := sent[j]
		err := cmd.Err()
		if err == nil {
			continue
		}
		errs[i] = s.classify(s.cfg.StreamPrefix+msgs[i].Topic, err)
		lost = lost || connectionFailure(err)
	}
	if lost {
		s.health.poke()
	} else {
		s.health.answered()
	}
	return errs
}

// Available reports whether the sink can deliver now: nil while Redis
// answers PING. It never blocks: a background probe keeps the answer
// current.
func (s *Sink) Available() error { return s.health.available() }

// Close stops the probe and closes the connections.
func (s *Sink) Close() error {
	s.closing.Do(func() {
		s.stop()
		<-s.watched
		_ = s.cl.Close()
	})
	return nil
}

// clientLog sets go-redis's logger, which is global, once: to the first
// sink's logger, at debug level (the sink logs what matters itself).
var clientLog sync.Once

// clientLogger passes go-redis's log lines to slog.
type clientLogger struct{ log *slog.Logger }

func (l clientLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// redisCode returns the error code of a reply error (its first word, such
// as WRONGTYPE or OOM), or "" when err is no reply from Redis.
func redisCode(err error) string {
	var re goredis.Error
	if !errors.As(err, &re) {
		return ""
	}
	code, _, _ := strings.Cut(re.Error(), " ")
	return code
}
