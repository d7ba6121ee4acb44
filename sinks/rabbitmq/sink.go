// Package rabbitmq delivers outbox messages to a RabbitMQ exchange over AMQP
// 0-9-1, with publisher confirms.
//
// Each message is published to Config.Exchange with the row's topic as
// routing key, persistent, mandatory, with message_id = its idempotency key,
// type = its topic, timestamp = its creation time and content_type = its
// content-type header; the other row headers become AMQP headers, except
// those that steer the broker (CC, BCC, x-death, …), which a row cannot set,
// and Idempotency-Key, which must not contradict message_id.
// A batch is published without waiting, then every publisher confirm is
// awaited: only an acked message counts as delivered. A message the broker
// returns (no queue is bound for its routing key) or nacks is retried.
//
// A message the broker can never take is a permanent failure, refused
// before publishing: a routing key or idempotency key over AMQP's 255
// bytes, headers over the relay's header budget (sinks.HeaderBytesMax), a
// content header (properties and headers) larger than the frame size
// negotiated with the broker (which would close the connection), a payload
// over Config.MaxMessageBytes. A payload over a lower max_message_size of
// the broker is refused by the broker, which closes the channel; the sink
// learns the limit from that first refusal and refuses later ones before
// publishing.
//
// amqp091-go does not reconnect: the sink does, in the background, with
// backoff. While it is disconnected, or the broker has blocked the
// connection (a memory or disk alarm), the sink reports itself unavailable,
// and in-flight messages fail as transient.
package rabbitmq

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Defaults for Config.
const (
	ExchangeDefault       = "amq.topic"
	ConfirmTimeoutDefault = 10 * time.Second
)

// MaxMessageBytesMax is the largest Config.MaxMessageBytes: RabbitMQ's own
// ceiling on max_message_size (512 MiB).
const MaxMessageBytesMax = 512 << 20

// Config configures a Sink.
type Config struct {
	// URL is the broker's AMQP URI (RABBITMQ_URL): amqp:// or amqps://,
	// with credentials and the virtual host as path
	// (amqp://user:pass@host:5672/vhost). It is never logged with its
	// password.
	URL string
	// Exchange receives every message, with the topic as routing key
	// (RABBITMQ_EXCHANGE). It must exist. Default ExchangeDefault, which
	// every broker has.
	Exchange string
	// ConfirmTimeout bounds a Deliver call, from its first publish to its
	// last publisher confirm, when its context allows longer
	// (RABBITMQ_CONFIRM_TIMEOUT). Default ConfirmTimeoutDefault.
	ConfirmTimeout time.Duration
	// TLSCAFile names a PEM file of CA certificates that verify the broker
	// (RABBITMQ_TLS_CA_FILE); empty uses the system's. amqps only.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile name a PEM client certificate and its key,
	// for brokers that require one (RABBITMQ_TLS_CERT_FILE,
	// RABBITMQ_TLS_KEY_FILE). Both or neither; amqps only.
	TLSCertFile, TLSKeyFile string
	// MaxMessageBytes is the largest payload the sink publishes
	// (RABBITMQ_MAX_MESSAGE_BYTES); a larger one fails permanently without
	// being sent. Keep it at most the broker's max_message_size. Zero: the
	// broker's default for its version (16 MiB from RabbitMQ 4.0, 128 MiB
	// before). At most MaxMessageBytesMax.
	MaxMessageBytes int64
	// ClientName is the connection's name in the broker's tools.
	ClientName string
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger

	// frameSize is the frame size the sink asks for at connection.tune,
	// for tests; 0 takes the broker's (128 KiB by default).
	frameSize int
}

// Sink publishes to RabbitMQ. It is safe for concurrent use.
type Sink struct {
	cfg Config
	// traceAttrs are TraceAttributes' answer.
	traceAttrs []attribute.KeyValue
	log        *slog.Logger
	tls        *tls.Config // nil: no TLS files, amqp091's defaults for amqps
	pass       string      // the URL's password, kept out of errors

	// sess is the live confirm-mode channel; nil while disconnected.
	sess atomic.Pointer[session]
	// down is Available's answer while sess is nil: why there is no
	// connection (wrapping sinks.ErrNotAttempted).
	down atomic.Pointer[error]
	// lastDialErr is the last failed connection attempt, nil once one
	// succeeds: CheckStartup reads it to report refused credentials.
	lastDialErr atomic.Pointer[error]
	// maxMessageSize is the broker's max_message_size once a refusal has
	// told it; 0 while unknown.
	maxMessageSize atomic.Int64

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var (
	_ sinks.Sink           = (*Sink)(nil)
	_ sinks.Availability   = (*Sink)(nil)
	_ sinks.StartupChecker = (*Sink)(nil)
	_ io.Closer            = (*Sink)(nil)
)

// New returns a sink for cfg and starts connecting in the background: it
// does not wait for the broker, and the sink reports itself unavailable
// until it is connected. It fails only on a configuration it can never use
// (an invalid URL or exchange name, unreadable TLS files).
func New(cfg Config) (*Sink, error) {
	cfg.Exchange = cmp.Or(cfg.Exchange, ExchangeDefault)
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = ConfirmTimeoutDefault
	}
	cfg.ClientName = cmp.Or(cfg.ClientName, "outbox-relay")
	uri, err := amqp.ParseURI(cfg.URL)
	if err != nil {
		// The parser's message may repeat the URL, password and all.
		return nil, fmt.Errorf("RabbitMQ URL %s is not a valid AMQP URI", Redact(cfg.URL))
	}
	if err := ValidateExchange(cfg.Exchange); err != nil {
		return nil, err
	}
	if cfg.MaxMessageBytes < 0 || cfg.MaxMessageBytes > MaxMessageBytesMax {
		return nil, fmt.Errorf("RabbitMQ max message bytes %d out of range [0, %d]", cfg.MaxMessageBytes, MaxMessageBytesMax)
	}
	tlsConfig, err := loadTLS(cfg, uri.Scheme == "amqps")
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{
		cfg:        cfg,
		log:        log.With("sink", "rabbitmq", "url", Redact(cfg.URL)),
		tls:        tlsConfig,
		pass:       uri.Password,
		traceAttrs: traceAttributes(cfg.URL),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	s.setDown(errors.New("connecting"))
	go s.run()
	return s, nil
}

// Deliver publishes msgs and reports one outcome per message: nil once the
// broker has confirmed it, with no return.
func (s *Sink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	if err := ctx.Err(); err != nil {
		return sinks.Fill(errs, fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err))
	}
	ss := s.live()
	if ss == nil {
		return sinks.Fill(errs, *s.down.Load())
	}
	if err := ss.conn.blocked(); err != nil {
		return sinks.Fill(errs, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
	defer cancel()

	pubs := make([]*publish, 0, len(msgs))
	index := make([]int, 0, len(msgs))
	for i := range msgs {
		p, err := s.prepare(&msgs[i], ss.conn)
		if err != nil {
			errs[i] = err
			continue
		}
		pubs = append(pubs, p)
		index = append(index, i)
	}
	if len(pubs) == 0 {
		return errs
	}
	// Publishing runs apart, so that Deliver returns by its deadline even
	// when a write blocks: a broker under an alarm stops reading.
	go ss.publishAll(ctx, pubs)
	for j, p := range pubs {
		errs[index[j]] = ss.await(ctx, p)
	}
	return errs
}

// Available reports whether the sink can deliver now: nil while connected
// and not blocked by the broker.
func (s *Sink) Available() error {
	ss := s.live()
	if ss == nil {
		return *s.down.Load()
	}
	return ss.conn.blocked()
}

// live returns the session to publish on, or nil when there is none or it
// has ended.
func (s *Sink) live() *session {
	ss := s.sess.Load()
	if ss == nil {
		return nil
	}
	select {
	case <-ss.dead:
		return nil
	default:
		return ss
	}
}

// Close closes the connection and stops reconnecting. Messages still
// awaiting a confirm fail as transient.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	select {
	case <-s.done:
	case <-time.After(2 * closeTimeout):
		return errors.New("close RabbitMQ connection: timed out")
	}
	return nil
}

// setDown records why the sink has no connection, for Available.
func (s *Sink) setDown(reason error) {
	err := fmt.Errorf("%w: not connected to RabbitMQ: %w", sinks.ErrNotAttempted, reason)
	s.down.Store(&err)
}
