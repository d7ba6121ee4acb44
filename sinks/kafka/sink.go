// Package kafka delivers outbox messages to Apache Kafka with franz-go's
// idempotent producer (acks=all).
//
// A batch is produced asynchronously and every record's acknowledgement is
// awaited; only an acknowledged record counts as delivered. The Kafka topic
// is TopicPrefix followed by the row's topic; the record key is the row's
// key (none when it has none), hashed with murmur2 exactly as the Java
// client does, so that one key always lands in one partition and keeps its
// order; the value is the payload, byte for byte (an empty payload is an
// empty value, never a null tombstone). Row headers become record headers,
// and the header Idempotency-Key carries the idempotency key: a row cannot
// set it.
//
// Kafka's idempotent producer drops a record re-sent by the same client
// session only: after a restart of the relay or a lease takeover, a
// message can be written twice, both copies with the same Idempotency-Key,
// and consumers drop the second.
//
// A record Kafka can never take (larger than MaxMessageBytes or the
// topic's max.message.bytes, an invalid topic name) is a permanent failure.
// A missing topic, a leader change, a timeout or a lost broker is
// transient; the client reconnects by itself, and while no broker answers
// the sink reports itself unavailable.
package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Defaults for Config.
const (
	ProduceTimeoutDefault     = 10 * time.Second
	MaxMessageBytesDefault    = 1000012 // Kafka's default max.message.bytes for a topic
	MaxBufferedRecordsDefault = 16384
)

// Bounds of Config.MaxMessageBytes: the client's limits on a record batch.
const (
	MaxMessageBytesMin = 512
	MaxMessageBytesMax = 100 << 20
)

// IdempotencyKeyHeader is the record header that carries a message's
// idempotency key.
const IdempotencyKeyHeader = "Idempotency-Key"

// Config configures a Sink.
type Config struct {
	// Brokers are the seed brokers, host:port (KAFKA_BROKERS). The client
	// discovers the rest of the cluster from them.
	Brokers []string
	// TopicPrefix is prepended to every topic (KAFKA_TOPIC_PREFIX).
	TopicPrefix string
	// ProduceTimeout bounds how long a record may wait for its
	// acknowledgement before it is failed (KAFKA_PRODUCE_TIMEOUT), and a
	// Deliver whose context has no deadline. A record already sent is
	// awaited past it, since failing it then could write it twice. At least
	// a second; default ProduceTimeoutDefault.
	ProduceTimeout time.Duration
	// MaxMessageBytes is the largest record batch the sink sends
	// (KAFKA_MAX_MESSAGE_BYTES); a record larger than this on its own fails
	// permanently. Keep it at most the topics' max.message.bytes. Default
	// MaxMessageBytesDefault.
	MaxMessageBytes int
	// MaxBufferedRecords bounds the records produced and not yet
	// acknowledged. Default MaxBufferedRecordsDefault.
	MaxBufferedRecords int
	// SASL authenticates to the brokers; the zero value does not.
	SASL SASL
	// TLS secures the connections; the zero value dials in plaintext.
	TLS TLS
	// ClientID names the client to the brokers. Default "outbox-relay".
	ClientID string
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger
}

// Sink produces to Kafka. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	cl     *kgo.Client
	log    *slog.Logger
	health *health

	stop    context.CancelFunc
	watched chan struct{} // closed when watch returns
	eofs    int           // probes in a row closed by the broker; watch's own
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

// New returns a sink producing to the cluster cfg names. It does not wait
// for the cluster: the client connects when it needs to, a background
// probe watches the brokers, and the sink reports itself unavailable until
// one answers.
func New(cfg Config) (*Sink, error) {
	if len(cfg.Brokers) == 0 {
		return nil, fmt.Errorf("new Kafka sink: no brokers")
	}
	if err := ValidateTopicPrefix(cfg.TopicPrefix); err != nil {
		return nil, fmt.Errorf("new Kafka sink: topic prefix %q: %w", cfg.TopicPrefix, err)
	}
	if err := cfg.SASL.Validate(); err != nil {
		return nil, fmt.Errorf("new Kafka sink: %w", err)
	}
	tlsCfg, err := cfg.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("new Kafka sink: TLS: %w", err)
	}
	cfg.ProduceTimeout = cmp.Or(cfg.ProduceTimeout, ProduceTimeoutDefault)
	if cfg.ProduceTimeout < time.Second {
		return nil, fmt.Errorf("new Kafka sink: produce timeout %s is shorter than a second", cfg.ProduceTimeout)
	}
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, MaxMessageBytesDefault)
	if cfg.MaxMessageBytes < MaxMessageBytesMin || cfg.MaxMessageBytes > MaxMessageBytesMax {
		return nil, fmt.Errorf("new Kafka sink: max message bytes %d out of range [%d, %d]", cfg.MaxMessageBytes, MaxMessageBytesMin, MaxMessageBytesMax)
	}
	cfg.MaxBufferedRecords = cmp.Or(cfg.MaxBufferedRecords, MaxBufferedRecordsDefault)
	cfg.ClientID = cmp.Or(cfg.ClientID, "outbox-relay")
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("sink", "kafka", "brokers", strings.Join(cfg.Brokers, ","))
	if cfg.SASL.Mechanism == MechanismPlain && !cfg.TLS.Enabled {
		log.Warn("SASL PLAIN without TLS sends the Kafka password in clear text; set KAFKA_TLS=true")
	}

	s := &Sink{cfg: cfg, log: log, health: newHealth(), watched: make(chan struct{}), traceAttrs: traceAttributes(cfg.Brokers)}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.WithLogger(kgoLogger{log}),
		kgo.WithHooks(s.health),
		// Idempotent, acks=all: kgo's defaults, stated so that they stay.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Keyed records hash with murmur2 over all partitions, as the Java
		// client's default partitioner does; unkeyed ones stick to a
		// partition for 64 KiB (KIP-794).
		kgo.RecordPartitioner(kgo.UniformBytesPartitioner(64<<10, true, true, nil)),
		kgo.RecordDeliveryTimeout(cfg.ProduceTimeout),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxMessageBytes)),
		kgo.MaxBufferedRecords(cfg.MaxBufferedRecords),
		// The relay batches already: send at once rather than linger.
		kgo.ProducerLinger(0),
		// After a leader change, learn the new leader within half a
		// second (franz-go waits up to 5s between metadata requests).
		kgo.MetadataMinAge(500 * time.Millisecond),
	}
	if m := cfg.SASL.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("new Kafka client: %w", err)
	}
	s.cl = cl
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.watch(ctx)
	return s, nil
}

// result is the outcome of the produce of msgs[i].
type result struct {
	i   int
	err error
}

// Deliver produces msgs and reports one outcome per message.
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
		ctx, cancel = context.WithTimeout(ctx, s.cfg.ProduceTimeout)
		defer cancel()
	}

	// Promises run on the client's goroutine and must not block: the
	// channel holds every outcome, even those that come after Deliver has
	// returned.
	results := make(chan result, len(msgs))
	pending := make([]bool, len(msgs))
	n := 0
	for i := range msgs {
		rec, err := s.record(&msgs[i])
		if err != nil {
			errs[i] = err
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err)
			continue
		}
		pending[i] = true
		n++
		s.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			if err == nil {
				s.health.acked()
			} else {
				err = s.classify(r.Topic, err)
			}
			results <- result{i, err}
		})
	}
	var missing []string
	defer func() {
		if len(missing) > 0 {
			// Forget missing topics (rows may name any number of them),
			// and topics deleted under the client: it would ask for them
			// in every metadata request, and a topic created again later
			// has a new id that only a fresh start picks up.
			go s.cl.PurgeTopicsFromProducing(missing...)
		}
	}()
	for ; n > 0; n-- {
		select {
		case r := <-results:
			errs[r.i], pending[r.i] = r.err, false
			if errors.Is(r.err, kerr.UnknownTopicOrPartition) || errors.Is(r.err, kerr.UnknownTopicID) {
				if t := s.cfg.TopicPrefix + msgs[r.i].Topic; !slices.Contains(missing, t) {
					missing = append(missing, t)
				}
			}
		case <-ctx.Done():
			// An acknowledgement may still come, but the lease no longer
			// covers it: what is not acknowledged now is not delivered.
			err := fmt.Errorf("await Kafka's acknowledgement: %w", ctx.Err())
			for i, p := range pending {
				if p {
					errs[i] = err
				}
			}
			return errs
		}
	}
	return errs
}

// record builds the Kafka record for m, refusing a topic Kafka can never
// accept.
func (s *Sink) record(m *sinks.Message) (*kgo.Record, error) {
	topic := s.cfg.TopicPrefix + m.Topic
	if err := ValidateTopic(topic); err != nil {
		return nil, sinks.Permanent(err)
	}
	if err := sinks.CheckMessage(m); err != nil {
		return nil, err
	}
	value := m.Payload
	if value == nil {
		value = []byte{} // a nil value is a tombstone in Kafka
	}
	rec := &kgo.Record{Topic: topic, Value: value, Headers: make([]kgo.RecordHeader, 0, len(m.Headers)+1)}
	if m.Key != "" {
		rec.Key = []byte(m.Key)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		if strings.EqualFold(k, IdempotencyKeyHeader) {
			continue // the relay's, not the row's
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(m.Headers[k])})
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: IdempotencyKeyHeader, Value: []byte(m.IdempotencyKey)})
	return rec, nil
}

// Available reports whether the sink can deliver now: nil while a broker
// answers. It never blocks: a background probe keeps the answer current.
func (s *Sink) Available() error { return s.health.available() }

// Close waits up to ProduceTimeout for the records still buffered to be
// acknowledged (when a broker answers), then closes the client.
func (s *Sink) Close() error {
	s.closing.Do(func() {
		s.stop()
		<-s.watched
		if s.Available() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ProduceTimeout)
			if err := s.cl.Flush(ctx); err != nil {
				s.log.Warn("records still unacknowledged when the Kafka client closed; their rows are delivered again", "err", err)
			}
			cancel()
		}
		s.cl.Close()
	})
	return nil
}
