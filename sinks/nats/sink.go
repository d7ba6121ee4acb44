// Package nats delivers outbox messages to NATS: to JetStream with an
// acknowledgement per message (the default), or to core NATS with a flush.
//
// JetStream publishing is asynchronous: a batch is published without waiting,
// then every PubAck is awaited, and only an acknowledged message counts as
// delivered. Each message carries Nats-Msg-Id = its idempotency key (in core
// NATS too, for consumers that drop duplicates themselves), so the stream
// drops a re-sent message within its duplicate window; a duplicate ack counts
// as delivered. Row headers become NATS headers, except that a row cannot set
// Nats-Msg-Id, and the subject is NATS_SUBJECT_PREFIX followed by the topic.
//
// A message the server can never take (larger than its max_payload or the
// stream's max_msg_size, an invalid subject) is a permanent failure. The
// connection reconnects forever; while it is down the sink reports itself
// unavailable and in-flight messages fail as transient.
//
// # Authentication and TLS
//
// Besides credentials in the URL, the sink authenticates with a creds file
// (Config.CredsFile: a user JWT and its NKey seed) or an NKey seed file
// (Config.NKeySeedFile), and verifies the server against a private CA
// (Config.TLSCAFile, which replaces the system roots) while presenting a
// client certificate (Config.TLSCertFile, Config.TLSKeyFile) to servers that
// require one. New checks every file before connecting; its errors never
// show what a file holds.
//
// A server that refuses the credentials (authorization violation,
// authentication expired or revoked) or a TLS handshake that fails is not
// a reason to give up: the client retries forever, so that a fix on the
// server's side, or a renewed file, takes effect without a restart. Each
// such failure is logged at error level once, not once per attempt (a
// different reason when it first appears in an outage, and the recovery at
// info), and while it lasts Available's error carries the reason, which
// /readyz shows.
package nats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Defaults for Config.
const (
	AckTimeoutDefault = 5 * time.Second
	MaxPendingDefault = 16384
)

// Config configures a Sink.
type Config struct {
	// URL is the NATS server URL (NATS_URL); several may be given separated
	// by commas. Credentials may be embedded (nats://user:pass@host).
	URL string
	// JetStream publishes with acknowledgements (NATS_JETSTREAM, default
	// true); false publishes to core NATS and flushes.
	JetStream bool
	// SubjectPrefix is prepended to every topic (NATS_SUBJECT_PREFIX).
	SubjectPrefix string
	// AckTimeout bounds the wait for one PubAck (NATS_ACK_TIMEOUT), and the
	// core NATS flush when Deliver's context has no deadline. Default
	// AckTimeoutDefault.
	AckTimeout time.Duration
	// MaxPending bounds asynchronous publishes awaiting an ack. Default
	// MaxPendingDefault.
	MaxPending int
	// Stream, when set, is created at start unless it exists (NATS_STREAM):
	// a file-backed stream capturing SubjectPrefix + ">" with a duplicate
	// window of DuplicateWindow, but at least two minutes. An existing
	// stream is never changed. For quick starts; production streams are
	// the operator's to manage.
	Stream string
	// DuplicateWindow is the duplicate window the start-up check expects of
	// the stream capturing the subjects: long enough to drop a message
	// re-sent after a lease expiry or the longest retry delay
	// (RELAY_LEASE + RELAY_BACKOFF_MAX). Zero skips that part of the check.
	DuplicateWindow time.Duration
	// ClientName is shown by the server for this connection.
	ClientName string
	// CredsFile is a NATS credentials file to authenticate with
	// (NATS_CREDS_FILE): a user JWT and its NKey seed, as nsc writes them
	// for decentralized (operator and account JWT) authentication. It is
	// read again at every connection attempt, so that a renewed file is
	// used from the next reconnection. Not with NKeySeedFile.
	CredsFile string
	// NKeySeedFile is a file holding a user NKey seed (SU…) to authenticate
	// with (NATS_NKEY_SEED_FILE). Not with CredsFile.
	NKeySeedFile string
	// TLSCAFile is a PEM file of the CA certificates that verify the server
	// (NATS_TLS_CA_FILE). When set, TLS is required and only these
	// certificates are trusted, not the system roots. Empty: the system
	// roots verify servers that offer TLS.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a PEM client certificate (chain) and
	// its private key (NATS_TLS_CERT_FILE, NATS_TLS_KEY_FILE), presented
	// to servers that verify clients; both or neither. When set, TLS is
	// required. Like the CA file, they are read again at every connection
	// attempt.
	TLSCertFile string
	TLSKeyFile  string
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger
}

// Sink publishes to NATS. It is safe for concurrent use.
type Sink struct {
	cfg Config
	// conn is the current client; renew replaces it when the client closes
	// for good (client.go).
	conn    atomic.Pointer[client]
	opts    []nats.Option // every client's options
	log     *slog.Logger
	state   *connState
	closing atomic.Bool   // Close was called: the connection's end is ours
	done    chan struct{} // closed by Close: a renewal stops waiting
	mu      sync.Mutex    // orders a renewal's new client with Close
	// isolateMu makes isolations take turns (isolate).
	isolateMu sync.Mutex
	// renewals counts the clients made to replace a closed one.
	renewals atomic.Int64
	// traceAttrs are TraceAttributes' answer.
	traceAttrs []attribute.KeyValue
}

var (
	_ sinks.Sink           = (*Sink)(nil)
	_ sinks.Availability   = (*Sink)(nil)
	_ sinks.StartupChecker = (*Sink)(nil)
	_ io.Closer            = (*Sink)(nil)
)

// New checks cfg's files, connects to NATS and returns a sink. It does not
// wait for the server: when none is reachable yet, or it refuses the
// connection, the client keeps trying in the background and the sink
// reports itself unavailable, with the reason, until it succeeds.
func New(cfg Config) (*Sink, error) {
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = AckTimeoutDefault
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = MaxPendingDefault
	}
	if cfg.ClientName == "" {
		cfg.ClientName = "outbox-relay"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("sink", "nats", "url", Redact(cfg.URL))
	security, err := cfg.securityOptions()
	if err != nil {
		return nil, fmt.Errorf("NATS config: %w", err)
	}
	s := &Sink{cfg: cfg, log: log, state: newConnState(log), done: make(chan struct{}), traceAttrs: traceAttributes(cfg.URL)}

	s.opts = append([]nats.Option{
		nats.Name(cfg.ClientName),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(true),
		// By default the client gives up on a server that refuses the
		// credentials twice; keep trying, so that a fix on the server's
		// side or a renewed creds file takes effect without a restart.
		nats.IgnoreAuthErrorAbort(),
		nats.ConnectHandler(func(*nats.Conn) { s.state.up("connected to NATS") }),
		nats.ReconnectHandler(func(*nats.Conn) { s.state.up("reconnected to NATS") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // Close: a disconnection the sink asked for
			}
			s.state.disconnected(err)
		}),
		// Attempts that fail to connect: the first one, and every one
		// that fails before the server answers (connection refused).
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { s.state.failed(err) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { s.state.serverError(err) }),
		nats.ClosedHandler(func(nc *nats.Conn) { s.clientClosed(nc) }),
	}, security...)
	c, err := s.dial()
	if err != nil {
		return nil, err
	}
	s.conn.Store(c)
	return s, nil
}

// Deliver publishes msgs and reports one outcome per message. When the
// client closes for good during the batch (the server closed the
// connection over something it was sent), the messages it failed are sent
// again one at a time on the new client (isolate): one that closes the
// connection on its own is refused as permanent, and the others go.
func (s *Sink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	c := s.conn.Load()
	if !c.nc.IsConnected() {
		if err := s.state.available(); err != nil {
			return sinks.Fill(errs, err)
		}
		return sinks.Fill(errs, errNotConnected)
	}
	if err := ctx.Err(); err != nil {
		return sinks.Fill(errs, fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err))
	}
	errs = s.deliverOn(ctx, c, msgs, errs)
	if c.isGone() && !s.closing.Load() {
		s.isolate(ctx, c, msgs, errs)
	}
	return errs
}

// deliverOn publishes msgs with client c.
func (s *Sink) deliverOn(ctx context.Context, c *client, msgs []sinks.Message, errs []error) []error {
	if c.js == nil {
		return s.deliverCore(ctx, c, msgs, errs)
	}
	return s.deliverJetStream(ctx, c, msgs, errs)
}

func (s *Sink) deliverJetStream(ctx context.Context, c *client, msgs []sinks.Message, errs []error) []error {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i := range msgs {
		m, err := s.natsMsg(c, &msgs[i])
		if err != nil {
			errs[i] = err
			continue
		}
		f, err := c.js.PublishMsgAsync(m)
		if err != nil {
			errs[i] = classify(fmt.Errorf("publish: %w", err))
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(fmt.Errorf("await ack: %w", err))
		case <-c.gone:
			// The client closed for good: no ack will come.
			for j := i; j < len(futures); j++ {
				if futures[j] != nil {
					errs[j] = fmt.Errorf("await ack: %w", errClientGone)
				}
			}
			return errs
		case <-ctx.Done():
			// The ack may still come, but the lease no longer covers it:
			// report this and every later message as not delivered.
			for j := i; j < len(futures); j++ {
				if futures[j] != nil {
					errs[j] = fmt.Errorf("await ack: %w", ctx.Err())
				}
			}
			return errs
		}
	}
	return errs
}

func (s *Sink) deliverCore(ctx context.Context, c *client, msgs []sinks.Message, errs []error) []error {
	published := false
	for i := range msgs {
		m, err := s.natsMsg(c, &msgs[i])
		if err != nil {
			errs[i] = err
			continue
		}
		if err := c.nc.PublishMsg(m); err != nil {
			errs[i] = classify(fmt.Errorf("publish: %w", err))
			continue
		}
		published = true
	}
	if !published {
		return errs
	}
	if _, ok := ctx.Deadline(); !ok {
		// FlushWithContext refuses a context without a deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.AckTimeout)
		defer cancel()
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		err = fmt.Errorf("flush: %w", err)
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return errs
}

// natsMsg builds the NATS message for m, with Nats-Msg-Id set to its
// idempotency key, refusing what the server can never accept: an invalid
// subject, headers over the relay's header budget, headers and payload
// together over the server's max_payload.
func (s *Sink) natsMsg(c *client, m *sinks.Message) (*nats.Msg, error) {
	subject := s.cfg.SubjectPrefix + m.Topic
	if err := ValidateSubject(subject); err != nil {
		return nil, sinks.Permanent(err)
	}
	if err := sinks.CheckMessage(m); err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Data: m.Payload, Header: make(nats.Header, len(m.Headers)+1)}
	for k, v := range m.Headers {
		// Nats-* headers steer the server (Nats-Msg-Id, Nats-Rollup,
		// Nats-Expected-*, Nats-TTL, …) and JetStream reads them in any
		// case: a row cannot set them. Nor Idempotency-Key, which would
		// contradict Nats-Msg-Id.
		if len(k) >= len(reservedPrefix) && strings.EqualFold(k[:len(reservedPrefix)], reservedPrefix) || strings.EqualFold(k, idempotencyKeyHeader) {
			continue
		}
		msg.Header[k] = []string{v}
	}
	msg.Header[jetstream.MsgIDHeader] = []string{m.IdempotencyKey}
	if max := c.nc.MaxPayload(); max > 0 {
		if size := int64(len(m.Payload) + headerSize(msg.Header)); size > max {
			return nil, sinks.Permanent(&sinks.LimitError{What: "message (payload and headers)", Size: size, Limit: "the NATS server's max_payload", Max: max})
		}
	}
	return msg, nil
}

// idempotencyKeyHeader is the header that carries the idempotency key on
// Kafka and HTTP; on NATS, Nats-Msg-Id does.
const idempotencyKeyHeader = "Idempotency-Key"

// headerSize returns the size of h as the client sends it, which the server
// counts in max_payload: "NATS/1.0\r\n", a "Name: value\r\n" line per
// value, and "\r\n".
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// Available reports whether the sink can deliver now: nil while connected,
// else an error wrapping sinks.ErrNotAttempted that says why, with the
// server's reason when it refused the connection (not connected to NATS:
// authorization violation) or the TLS handshake's error. It reads what the
// connection's callbacks recorded, so it never waits.
func (s *Sink) Available() error {
	return s.state.available()
}

// Close flushes and closes the connection.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closing.Swap(true) {
		s.mu.Unlock()
		return nil
	}
	close(s.done)
	c := s.conn.Load()
	s.mu.Unlock()
	if c.nc.IsConnected() {
		_ = c.nc.FlushTimeout(time.Second)
	}
	s.state.close()
	c.close()
	return nil
}

// reservedPrefix starts the headers NATS and JetStream act on.
const reservedPrefix = "Nats-"

var errNotConnected = fmt.Errorf("%w: not connected to NATS", sinks.ErrNotAttempted)

// classify marks the errors no retry can fix as permanent, and explains a
// missing stream.
func classify(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("no JetStream stream captures this subject (create one, or set NATS_SUBJECT_PREFIX to the subjects a stream captures): %w", err)
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrHeadersNotSupported):
		return sinks.Permanent(err)
	case errors.As(err, &apiErr) && permanentAPIErrors[apiErr.ErrorCode]:
		return sinks.Permanent(err)
	}
	return err
}

// permanentAPIErrors are JetStream refusals of the message itself.
var permanentAPIErrors = map[jetstream.ErrorCode]bool{
	10054: true, // message size exceeds maximum allowed (the stream's max_msg_size)
	10097: true, // header size exceeds maximum allowed
}

// Redact removes passwords and tokens from a NATS URL list, for logs. A URL
// without a scheme is read as nats://, as the client does.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		u, err := url.Parse(p)
		if err != nil || u.Opaque != "" {
			parts[i] = "(unparsable URL)"
			continue
		}
		if u.User != nil {
			u.User = url.User("redacted")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
