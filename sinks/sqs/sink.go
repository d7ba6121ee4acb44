// Package sqs delivers outbox messages to Amazon SQS queues (standard,
// FIFO and fair queues) with SendMessageBatch, through the AWS SDK for Go
// v2.
//
// A row goes to one fixed queue (QueueURL names it) or to the queue its
// topic names (QueueURL is the account's URL, ending in a slash: the queue
// name is QueuePrefix and the topic, QueueName says how). A queue's URL and
// its MaximumMessageSize are read once and again every five minutes; a
// queue SQS says does not exist dead-letters the row.
//
// The body is the payload when it is text SQS takes (UTF-8 of the
// characters XML allows), else its base64 with the attribute
// outbox_body_encoding=base64; an empty payload is the body "-" with
// outbox_body_encoding=empty. The attributes Idempotency-Key and
// outbox_topic carry the row's idempotency key and topic, row headers
// follow (traceparent, tracestate, baggage first) while SQS's ten
// attributes last, and what does not fit, or cannot be an attribute, is
// one JSON object in outbox_headers.
//
// On a FIFO queue the row's key is the MessageGroupId (an unkeyed row's is
// FIFODefaultGroup, or its own idempotency key when that is empty) and the
// idempotency key the MessageDeduplicationId, both mapped by
// sinks/internal/awsids. On a standard queue FairQueues makes the key the
// MessageGroupId, which turns on SQS fair queues; standard queues keep no
// order.
//
// Each entry's failure is that row's outcome: a sender fault is permanent,
// throttling (retried no sooner than a second later), server faults and
// what the setup causes (credentials, IAM, KMS) are transient. A queue
// SQS cannot be reached for makes the sink unavailable until a probe gets
// an answer.
package sqs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsmsg"
)

// Defaults and bounds of Config.
const (
	TimeoutDefault = 10 * time.Second
	TimeoutMin     = time.Second
)

// MaxBatchEntries is the most entries SendMessageBatch takes.
const MaxBatchEntries = 10

// How the sink watches SQS.
const (
	probeInterval = 2 * time.Second
	retryInterval = 250 * time.Millisecond
	probeTimeout  = 5 * time.Second
)

// Config configures a Sink.
type Config struct {
	// QueueURL is the queue every row goes to (SQS_QUEUE_URL), or, ending
	// in a slash, the account whose queues the rows' topics name
	// (https://sqs.REGION.amazonaws.com/ACCOUNT/).
	QueueURL string
	// QueuePrefix begins the queue name of each row's topic
	// (SQS_QUEUE_PREFIX); only with a QueueURL ending in a slash.
	QueuePrefix string
	// Region is the AWS region (SQS_REGION). Empty: the AWS chain's
	// (AWS_REGION, the shared config), else the one in QueueURL's host.
	Region string
	// Endpoint replaces SQS's endpoint (SQS_ENDPOINT): LocalStack,
	// ElasticMQ, fauxqs, a VPC endpoint.
	Endpoint string
	// Timeout bounds one Deliver, the SDK's retries included (SQS_TIMEOUT);
	// messages not acknowledged by then are retried. Default
	// TimeoutDefault.
	Timeout time.Duration
	// FIFODefaultGroup is the MessageGroupId of unkeyed rows on FIFO
	// queues (SQS_FIFO_DEFAULT_GROUP). Empty: each unkeyed row is a group
	// of its own (its idempotency key), so unkeyed rows keep no order.
	FIFODefaultGroup string
	// FairQueues makes a keyed row's key its MessageGroupId on standard
	// queues too (SQS_FAIR_QUEUES): SQS fair queues.
	FairQueues bool
	// Credentials, when set, replace the AWS credential chain (tests).
	Credentials aws.CredentialsProvider
	// AppID is sent in the User-Agent.
	AppID string
	// Logger receives the sink's events. Default slog.Default().
	Logger *slog.Logger
}

// Sink sends to SQS. It is safe for concurrent use.
type Sink struct {
	cfg Config
	cl  *sqs.Client
	qs  *queues
	log *slog.Logger

	// down is nil while SQS answers, else why deliveries are not
	// attempted (wrapping sinks.ErrNotAttempted).
	down atomic.Pointer[error]
	// lastErr is the last probe's error.
	lastErr atomic.Pointer[error]
	// throttledUntil is when a throttled request's pause ends, in Unix
	// nanoseconds.
	throttledUntil atomic.Int64
	// lastOK is when SQS last answered, in Unix nanoseconds.
	lastOK atomic.Int64
	wake   chan struct{}

	stop    context.CancelFunc
	watched chan struct{}
	closing sync.Once
}

var (
	_ sinks.Sink           = (*Sink)(nil)
	_ sinks.Availability   = (*Sink)(nil)
	_ sinks.StartupChecker = (*Sink)(nil)
	_ io.Closer            = (*Sink)(nil)
)

var errNotConnectedYet = fmt.Errorf("%w: SQS has not answered yet", sinks.ErrNotAttempted)

// New returns a sink for the queues cfg names. It does not wait for SQS:
// a background probe watches it, and the sink reports itself unavailable
// until it answers.
func New(cfg Config) (*Sink, error) {
	account, fixed, err := ParseQueueURL(cfg.QueueURL)
	if err != nil {
		return nil, fmt.Errorf("new SQS sink: queue URL: %w", err)
	}
	if fixed != "" && cfg.QueuePrefix != "" {
		return nil, fmt.Errorf("new SQS sink: a queue prefix with the URL of one queue")
	}
	if err := ValidatePrefix(cfg.QueuePrefix); err != nil {
		return nil, fmt.Errorf("new SQS sink: queue prefix: %w", err)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	if cfg.Timeout < TimeoutMin {
		return nil, fmt.Errorf("new SQS sink: timeout %s is shorter than a second", cfg.Timeout)
	}
	log := cmp.Or(cfg.Logger, slog.Default()).With("sink", "sqs")
	opts := []func(*config.LoadOptions) error{config.WithAppID(cmp.Or(cfg.AppID, "outbox-relay"))}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("new SQS sink: AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = RegionOf(cfg.QueueURL)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("new SQS sink: no AWS region: set SQS_REGION or AWS_REGION")
	}
	cl := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	s := &Sink{
		cfg: cfg, cl: cl, log: log.With("region", awsCfg.Region),
		qs:      &queues{cl: cl, account: account, known: map[string]*queue{}, fixed: fixed},
		wake:    make(chan struct{}, 1),
		watched: make(chan struct{}),
	}
	if fixed != "" {
		s.qs.fixedURL = cfg.QueueURL
		if cfg.Endpoint != "" {
			s.qs.fixedURL = "" // the emulator's URL for it may differ: ask
		}
	}
	s.down.Store(&errNotConnectedYet)
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.watch(ctx)
	return s, nil
}

// Available reports whether the sink can deliver now: nil while SQS
// answers and does not throttle the relay. It never blocks.
func (s *Sink) Available() error {
	if err := s.down.Load(); err != nil {
		return *err
	}
	if until := s.throttledUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return fmt.Errorf("%w: SQS throttles the relay; sending again shortly", sinks.ErrNotAttempted)
	}
	return nil
}

// Close stops the probe.
func (s *Sink) Close() error {
	s.closing.Do(func() {
		s.stop()
		<-s.watched
	})
	return nil
}

func (s *Sink) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// watch probes SQS until ctx ends: at once, then every probeInterval while
// it answers (unless it answered a delivery meanwhile), every
// retryInterval while it does not, and at once when a request fails to
// reach it.
func (s *Sink) watch(ctx context.Context) {
	defer close(s.watched)
	first := true
	for {
		err := s.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		wasUp := s.down.Load() == nil
		if err == nil {
			s.lastOK.Store(time.Now().UnixNano())
			s.lastErr.Store(nil)
			s.down.Store(nil)
			if !wasUp {
				s.log.Info("SQS answers")
			}
		} else {
			prev := s.lastErr.Swap(&err)
			down := fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err)
			s.down.Store(&down)
			if wasUp || first || prev == nil || (*prev).Error() != err.Error() {
				s.log.Warn("SQS cannot take deliveries; rows wait", "err", err)
			}
		}
		first = false
		wait := probeInterval
		if err != nil {
			wait = retryInterval
		}
		timer := time.NewTimer(wait)
		for skip := true; skip; {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-s.wake:
				if err != nil {
					continue
				}
				skip = false
			case <-timer.C:
				if err == nil && time.Since(time.Unix(0, s.lastOK.Load())) < probeInterval {
					timer.Reset(probeInterval)
					continue
				}
				skip = false
			}
		}
		timer.Stop()
	}
}

// probe asks SQS for the fixed queue's attributes (which it keeps), or
// for a queue under the prefix, and says why deliveries cannot go when
// they cannot: SQS unreachable, the credentials refused, the fixed queue
// missing or denied. Any other answer proves SQS reachable.
func (s *Sink) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if s.qs.fixed != "" {
		q, err := s.qs.read(ctx, s.qs.fixed)
		if err == nil {
			s.qs.mu.Lock()
			s.qs.known[q.name] = q
			s.qs.mu.Unlock()
			return nil
		}
		if noQueue(err) {
			return fmt.Errorf("SQS queue %s does not exist (SQS_QUEUE_URL): %w", s.qs.fixed, err)
		}
		return probeError(err)
	}
	_, err := s.cl.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(s.cfg.QueuePrefix), MaxResults: aws.Int32(1)})
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if errors.As(err, &api) && !authCode(api.ErrorCode()) {
		return nil // an answer: SQS is there (ListQueues may be denied)
	}
	return probeError(err)
}

// probeError says what a failed probe means.
func probeError(err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch {
		case authCode(api.ErrorCode()):
			return fmt.Errorf("%w: %w", errAuthFailed, err)
		case deniedCode(api.ErrorCode()):
			return fmt.Errorf("%w: %w", errDenied, err)
		}
		return err
	}
	return fmt.Errorf("SQS does not answer: %w", err)
}

var (
	errAuthFailed = errors.New("SQS refuses the relay's credentials (the AWS credential chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, or instance metadata)")
	errDenied     = errors.New("SQS denies the relay access to the queue (its IAM policy needs sqs:GetQueueUrl, sqs:GetQueueAttributes and sqs:SendMessage)")
)

// batch is one SendMessageBatch: its entries and their messages' indexes.
type batch struct {
	idx     []int
	entries []*entry
	size    int
}

// Deliver sends msgs and reports one outcome per message.
func (s *Sink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	if err := s.Available(); err != nil {
		return sinks.Fill(errs, err)
	}
	if err := ctx.Err(); err != nil {
		return sinks.Fill(errs, fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err))
	}
	// Timeout bounds the delivery whatever deadline ctx has.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	// Each queue's messages, in their order.
	var names []string
	byQueue := map[string][]int{}
	for i := range msgs {
		name := s.qs.fixed
		if name == "" {
			n, err := QueueName(s.cfg.QueuePrefix, msgs[i].Topic)
			if err != nil {
				errs[i] = sinks.Permanent(fmt.Errorf("topic %s names no SQS queue: %w", awsmsg.Clipped(msgs[i].Topic), err))
				continue
			}
			name = n
		}
		if _, ok := byQueue[name]; !ok {
			names = append(names, name)
		}
		byQueue[name] = append(byQueue[name], i)
	}
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.deliverQueue(ctx, name, msgs, byQueue[name], errs)
		}()
	}
	wg.Wait()
	return errs
}

// deliverQueue sends the messages idx of msgs to queue name, in batches
// sent one after the other, so that a FIFO group's messages keep their
// order; a message whose group had a message fail before it is not sent.
func (s *Sink) deliverQueue(ctx context.Context, name string, msgs []sinks.Message, idx []int, errs []error) {
	q, err := s.qs.get(ctx, name)
	if err != nil {
		if !sinks.IsPermanent(err) {
			s.wakeOnTransport(err)
		}
		for _, i := range idx {
			errs[i] = err
		}
		return
	}
	var batches []*batch
	cur := &batch{}
	for _, i := range idx {
		e, err := s.build(&msgs[i], q)
		if err != nil {
			errs[i] = err
			continue
		}
		if len(cur.entries) == MaxBatchEntries || cur.size+e.size > q.maxSize {
			batches = append(batches, cur)
			cur = &batch{}
		}
		cur.idx, cur.entries, cur.size = append(cur.idx, i), append(cur.entries, e), cur.size+e.size
	}
	if len(cur.entries) > 0 {
		batches = append(batches, cur)
	}
	failedGroups := map[string]bool{}
	var stopped error // set when a whole request failed: the rest waits
	for _, b := range batches {
		var send []int // positions in b sent
		for j, e := range b.entries {
			i := b.idx[j]
			switch {
			case stopped != nil:
				errs[i] = stopped
			case ctx.Err() != nil:
				errs[i] = fmt.Errorf("%w: %w", sinks.ErrNotAttempted, ctx.Err())
			case q.fifo && failedGroups[e.group]:
				errs[i] = fmt.Errorf("%w: an earlier message of its FIFO group failed in this batch", sinks.ErrNotAttempted)
			default:
				send = append(send, j)
			}
		}
		if len(send) == 0 {
			continue
		}
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url)}
		for _, j := range send {
			e := b.entries[j]
			re := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), MessageBody: aws.String(e.body), MessageAttributes: e.attrs}
			if e.group != "" {
				re.MessageGroupId = aws.String(e.group)
			}
			if e.dedup != "" {
				re.MessageDeduplicationId = aws.String(e.dedup)
			}
			in.Entries = append(in.Entries, re)
		}
		out, err := s.cl.SendMessageBatch(ctx, in)
		if err != nil {
			rerr := requestError(q.name, err)
			switch {
			case noQueue(err):
				s.qs.forget(q.name)
			case isThrottled(rerr):
				s.throttledUntil.Store(time.Now().Add(throttleDelay).UnixNano())
			default:
				s.wakeOnTransport(err)
			}
			for _, j := range send {
				errs[b.idx[j]] = rerr
			}
			if sinks.IsPermanent(rerr) {
				stopped = rerr
			} else {
				stopped = fmt.Errorf("%w: an earlier request to SQS queue %s failed: %w", sinks.ErrNotAttempted, q.name, err)
			}
			continue
		}
		s.lastOK.Store(time.Now().UnixNano())
		done := make(map[int]bool, len(send))
		for _, ok := range out.Successful {
			if j, err := strconv.Atoi(aws.ToString(ok.Id)); err == nil && j >= 0 && j < len(b.idx) {
				errs[b.idx[j]], done[j] = nil, true
			}
		}
		for _, f := range out.Failed {
			j, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || j < 0 || j >= len(b.idx) {
				continue
			}
			e := entryError(q.name, f)
			errs[b.idx[j]], done[j] = e, true
			if !sinks.IsPermanent(e) {
				failedGroups[b.entries[j].group] = true
			}
			if isThrottled(e) {
				s.throttledUntil.Store(time.Now().Add(throttleDelay).UnixNano())
			}
		}
		for _, j := range send {
			if !done[j] {
				errs[b.idx[j]] = fmt.Errorf("SQS gave no outcome for the message to queue %s", q.name)
				failedGroups[b.entries[j].group] = true
			}
		}
	}
}

func isThrottled(err error) bool {
	_, ok := sinks.RetryDelay(err)
	return ok
}

// wakeOnTransport asks for a probe when err did not come from SQS (no
// answer): it may be gone.
func (s *Sink) wakeOnTransport(err error) {
	var api smithy.APIError
	if !errors.As(err, &api) {
		s.poke()
	}
}
