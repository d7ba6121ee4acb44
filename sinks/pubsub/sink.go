// Package pubsub delivers outbox messages to Google Cloud Pub/Sub with the
// official client, cloud.google.com/go/pubsub/v2.
//
// A message goes to the Pub/Sub topic Topic when it is set, else to
// TopicPrefix followed by the row's topic, in Project. Its data is the
// payload, byte for byte; the row's headers are its attributes, with two
// of the relay's own: outbox_idempotency_key (the row's idempotency key,
// which consumers dedupe on: Pub/Sub gives every copy a new message ID)
// and outbox_topic (the row's topic). The row's key is the ordering key;
// a row without one is published without, batched freely.
//
// Only a publish Pub/Sub acknowledged (a message ID) counts as delivered.
// When a publish with an ordering key fails, the client pauses the key:
// every later message of that key fails at once (reported not attempted)
// until the sink resumes it (ResumePublish), which it does once every
// publish of the key it started has its outcome, so that the failed row
// is retried first and the key's order holds across retries.
//
// What Pub/Sub can never take (a message over its documented limits, an
// invalid topic ID, a topic that does not exist when the row names it) is
// a permanent failure, refused before sending where it can be known. A
// refused credential, a missing grant, a missing PUBSUB_TOPIC, throttling
// and outages are transient; while Pub/Sub is unreachable, refuses the
// credentials or throttles, the sink reports itself unavailable.
package pubsub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	ps "cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	gax "github.com/googleapis/gax-go/v2"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/api/option"
	"google.golang.org/api/option/internaloption"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Defaults and bounds of Config.
const (
	TimeoutDefault = 10 * time.Second
	TimeoutMin     = time.Second
)

// Config configures a Sink.
type Config struct {
	// Project is the Google Cloud project of the topics (PUBSUB_PROJECT).
	Project string
	// Topic, when set, is the topic ID every message goes to
	// (PUBSUB_TOPIC); TopicPrefix is then unused.
	Topic string
	// TopicPrefix is prepended to the row's topic to form the topic ID
	// (PUBSUB_TOPIC_PREFIX).
	TopicPrefix string
	// Timeout bounds a publish, the client's own retries included
	// (PUBSUB_TIMEOUT), and a Deliver whose context has no deadline. At
	// least TimeoutMin; default TimeoutDefault.
	Timeout time.Duration
	// Endpoint overrides Pub/Sub's endpoint, host:port
	// (PUBSUB_ENDPOINT), e.g. a locational endpoint such as
	// europe-west1-pubsub.googleapis.com:443.
	Endpoint string
	// EmulatorHost, host:port, sends everything to a Pub/Sub emulator in
	// plaintext and without credentials (PUBSUB_EMULATOR_HOST), as
	// Google's client libraries do.
	EmulatorHost string
	// CredentialsJSON is a service account key (PUBSUB_CREDENTIALS);
	// empty: application default credentials (workload identity on GKE,
	// GOOGLE_APPLICATION_CREDENTIALS, the metadata server).
	CredentialsJSON Credentials
	// UserAgent names the client to Google. Default "outbox-relay".
	UserAgent string
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger
}

// Sink publishes to Pub/Sub. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	client *ps.Client
	log    *slog.Logger
	health *health

	mu     sync.Mutex
	topics map[string]*topicEntry // by topic ID

	stop    context.CancelFunc
	watched chan struct{} // closed when watch returns
	closing sync.Once
	// denied holds the topics whose refused publishes were logged.
	denied sync.Map
	// traceAttrs are TraceAttributes' answer.
	traceAttrs []attribute.KeyValue
}

var (
	_ sinks.Sink           = (*Sink)(nil)
	_ sinks.Availability   = (*Sink)(nil)
	_ sinks.StartupChecker = (*Sink)(nil)
	_ io.Closer            = (*Sink)(nil)
)

// New returns a sink publishing to cfg.Project. It does not wait for
// Pub/Sub: a background probe watches it, and the sink reports itself
// unavailable until it answers.
func New(cfg Config) (*Sink, error) {
	if cfg.Project == "" {
		return nil, errors.New("new Pub/Sub sink: no project")
	}
	if cfg.Topic != "" {
		if err := ValidateTopicID(cfg.Topic); err != nil {
			return nil, fmt.Errorf("new Pub/Sub sink: topic: %w", err)
		}
	}
	if err := ValidateTopicPrefix(cfg.TopicPrefix); err != nil {
		return nil, fmt.Errorf("new Pub/Sub sink: topic prefix %q: %w", cfg.TopicPrefix, err)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	if cfg.Timeout < TimeoutMin {
		return nil, fmt.Errorf("new Pub/Sub sink: timeout %s is shorter than %s", cfg.Timeout, TimeoutMin)
	}
	if len(cfg.CredentialsJSON) > 0 {
		if err := ValidateCredentials(cfg.CredentialsJSON); err != nil {
			return nil, fmt.Errorf("new Pub/Sub sink: %w", err)
		}
	}
	cfg.UserAgent = cmp.Or(cfg.UserAgent, "outbox-relay")
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("sink", "pubsub", "project", cfg.Project)

	client, err := ps.NewClientWithConfig(context.Background(), cfg.Project, &ps.ClientConfig{
		TopicAdminCallOptions: &vkit.TopicAdminCallOptions{Publish: publishCallOptions()},
	}, clientOptions(cfg)...)
	if err != nil {
		return nil, fmt.Errorf("new Pub/Sub client: %w", err)
	}
	s := &Sink{
		cfg: cfg, client: client, log: log, health: newHealth(),
		topics: map[string]*topicEntry{}, watched: make(chan struct{}),
		traceAttrs: traceAttributes(cfg),
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.watch(ctx)
	return s, nil
}

// clientOptions are the client's options for cfg: its endpoint and
// credentials, and a quick reconnection after an outage (gRPC waits up to
// two minutes between attempts by default).
func clientOptions(cfg Config) []option.ClientOption {
	opts := []option.ClientOption{
		option.WithUserAgent(cfg.UserAgent),
		option.WithGRPCDialOption(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		})),
	}
	switch {
	case cfg.EmulatorHost != "":
		// What the client library does with PUBSUB_EMULATOR_HOST.
		return append(opts,
			option.WithEndpoint(cfg.EmulatorHost),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithoutAuthentication(),
			option.WithTelemetryDisabled(),
			internaloption.SkipDialSettingsValidation(),
		)
	case len(cfg.CredentialsJSON) > 0:
		opts = append(opts, option.WithAuthCredentialsJSON(option.ServiceAccount, cfg.CredentialsJSON))
	}
	if cfg.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(cfg.Endpoint))
	}
	return opts
}

// publishCallOptions are the client's retries of a publish request: those
// of the library, but for ResourceExhausted, which the sink reports at
// once (it pauses, and the rows wait) rather than retrying it for the
// whole timeout.
func publishCallOptions() []gax.CallOption {
	return []gax.CallOption{gax.WithRetry(func() gax.Retryer {
		return gax.OnCodes([]codes.Code{
			codes.Aborted, codes.Canceled, codes.Internal, codes.Unknown, codes.Unavailable, codes.DeadlineExceeded,
		}, gax.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2})
	})}
}

// topicEntry is the publisher of one topic and the publishes the sink
// has started on it. Its counts are guarded by Sink.mu.
type topicEntry struct {
	pub      *ps.Publisher
	inflight int
	// keys counts the unfinished publishes of each ordering key, and
	// whether one of them failed (the client then pauses the key).
	keys     map[string]*keyState
	lastUsed time.Time
}

type keyState struct {
	n      int
	failed bool
}

// topicName is the full name of topic ID id.
func (s *Sink) topicName(id string) string { return "projects/" + s.cfg.Project + "/topics/" + id }

// acquire returns the publisher of topic id, counting a publish of key on
// it.
func (s *Sink) acquire(id, key string) *topicEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.topics[id]
	if e == nil {
		pub := s.client.Publisher(s.topicName(id))
		pub.EnableMessageOrdering = true
		pub.PublishSettings.Timeout = s.cfg.Timeout
		// The relay batches already: send at once rather than linger.
		pub.PublishSettings.DelayThreshold = time.Millisecond
		pub.PublishSettings.CountThreshold = ps.MaxPublishRequestCount
		pub.PublishSettings.ByteThreshold = 1 << 20
		e = &topicEntry{pub: pub, keys: map[string]*keyState{}}
		s.topics[id] = e
	}
	e.inflight++
	if key != "" {
		k := e.keys[key]
		if k == nil {
			k = &keyState{}
			e.keys[key] = k
		}
		k.n++
	}
	return e
}

// release counts the end of a publish of key on e, failed when err is set.
// When the key's last publish in flight has ended and one of them failed,
// the key is resumed: its failed rows are retried first, being the oldest
// of the key, so that its order holds.
func (s *Sink) release(e *topicEntry, key string, err error) {
	s.mu.Lock()
	e.inflight--
	e.lastUsed = time.Now()
	resume := false
	if k := e.keys[key]; key != "" && k != nil {
		k.n--
		k.failed = k.failed || err != nil
		if k.n == 0 {
			delete(e.keys, key)
			resume = k.failed
		}
	}
	s.mu.Unlock()
	if resume {
		e.pub.ResumePublish(key)
	}
}

// How long an idle publisher is kept, and how many are kept at most when
// idle: rows may name any number of topics.
const (
	publisherIdle = time.Minute
	publishersMax = 256
)

// evictIdle stops the publishers that have nothing in flight and have been
// idle for publisherIdle, or all idle ones when there are more than
// publishersMax.
func (s *Sink) evictIdle() {
	var stopped []*ps.Publisher
	s.mu.Lock()
	crowded := len(s.topics) > publishersMax
	for id, e := range s.topics {
		if e.inflight == 0 && (crowded || time.Since(e.lastUsed) > publisherIdle) {
			delete(s.topics, id)
			stopped = append(stopped, e.pub)
		}
	}
	s.mu.Unlock()
	for _, p := range stopped {
		p.Stop()
	}
}

// sent is a message handed to the client and its outcome to come.
type sent struct {
	i   int
	id  string
	e   *topicEntry
	msg *ps.Message
	res *ps.PublishResult
}

// Deliver publishes msgs and reports one outcome per message.
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
	pending := make([]*sent, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		id := s.topicID(m)
		msg, err := s.message(m, s.topicName(id))
		if err != nil {
			errs[i] = err
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err)
			continue
		}
		e := s.acquire(id, m.Key)
		pending = append(pending, &sent{i: i, id: id, e: e, msg: msg, res: e.pub.Publish(ctx, msg)})
	}
	for j, p := range pending {
		select {
		case <-p.res.Ready():
		case <-ctx.Done():
			s.abandon(ctx, msgs, errs, pending[j:])
			return errs
		}
		_, err := p.res.Get(context.Background())
		s.release(p.e, p.msg.OrderingKey, err)
		errs[p.i] = s.outcome(ctx, p, err)
	}
	return errs
}

// abandon reports the publishes of rest that have no outcome by the
// deadline as transient failures (Pub/Sub may still take them: the copy
// sent again carries the same idempotency key), and counts their ends in
// the background, so that their keys are resumed.
func (s *Sink) abandon(ctx context.Context, msgs []sinks.Message, errs []error, rest []*sent) {
	var late []*sent
	for _, p := range rest {
		select {
		case <-p.res.Ready():
			_, err := p.res.Get(context.Background())
			s.release(p.e, p.msg.OrderingKey, err)
			errs[p.i] = s.outcome(ctx, p, err)
		default:
			errs[p.i] = fmt.Errorf("Pub/Sub topic %s did not acknowledge the message before the delivery's deadline (PUBSUB_TIMEOUT=%s): %w", p.id, s.cfg.Timeout, ctx.Err())
			late = append(late, p)
		}
	}
	if len(late) == 0 {
		return
	}
	go func() {
		for _, p := range late {
			<-p.res.Ready()
			_, err := p.res.Get(context.Background())
			s.release(p.e, p.msg.OrderingKey, err)
		}
	}()
}

// Available reports whether the sink can deliver now: nil while Pub/Sub
// answers and does not throttle. It never blocks: a background probe
// keeps the answer current.
func (s *Sink) Available() error { return s.health.available() }

// Close stops every publisher, waiting up to Timeout for what they still
// hold, then closes the client.
func (s *Sink) Close() error {
	s.closing.Do(func() {
		s.stop()
		<-s.watched
		s.mu.Lock()
		var pubs []*ps.Publisher
		for _, e := range s.topics {
			pubs = append(pubs, e.pub)
		}
		s.topics = map[string]*topicEntry{}
		s.mu.Unlock()
		var wg sync.WaitGroup
		for _, p := range pubs {
			wg.Go(p.Stop)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(s.cfg.Timeout):
			s.log.Warn("messages still unacknowledged when the Pub/Sub client closed; their rows are delivered again")
		}
		if err := s.client.Close(); err != nil {
			s.log.Debug("close the Pub/Sub client", "err", err)
		}
	})
	return nil
}
