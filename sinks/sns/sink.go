// Package sns publishes outbox messages to Amazon SNS topics (standard
// and FIFO topics) with PublishBatch, through the AWS SDK for Go v2.
//
// A row goes to one fixed topic (TopicARN names it) or to the topic its
// topic names (TopicARN is the prefix form ending in a colon after the
// account, arn:aws:sns:REGION:ACCOUNT:, and the topic name is TopicPrefix
// and the row's topic, TopicName says how). A topic SNS says does not
// exist dead-letters the row.
//
// The body is the payload when it is text SNS takes (UTF-8 of the
// characters XML allows, which SQS subscribers take too), else its base64
// with the attribute outbox_body_encoding=base64; an empty payload is the
// body "-" with outbox_body_encoding=empty. The attributes
// Idempotency-Key and outbox_topic carry the row's idempotency key and
// topic, row headers follow (traceparent, tracestate, baggage first) while
// SNS's ten attributes last, and what does not fit, or cannot be an
// attribute, is one JSON object in outbox_headers: the same message the
// SQS sink sends, so that a consumer of an SQS queue subscribed with raw
// message delivery reads both alike.
//
// On a FIFO topic (its name ends in .fifo) the row's key is the
// MessageGroupId (an unkeyed row's is FIFODefaultGroup, or its own
// idempotency key when that is empty) and the idempotency key the
// MessageDeduplicationId, both mapped by sinks/internal/awsids as the SQS
// sink maps them. Standard topics keep no order.
//
// Each entry's failure is that row's outcome: a sender fault is permanent,
// throttling (retried no sooner than a second later), server faults and
// what the setup causes (credentials, IAM, KMS) are transient. An SNS the
// relay cannot reach makes the sink unavailable until a probe gets an
// answer.
package sns

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
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsmsg"
)

// Defaults and bounds of Config.
const (
	TimeoutDefault = 10 * time.Second
	TimeoutMin     = time.Second
)

// MaxBatchEntries is the most entries PublishBatch takes.
const MaxBatchEntries = 10

// maxFIFOBatchEntries is the most entries the sink sends in one
// PublishBatch to a FIFO topic (deliverTopic says why).
const maxFIFOBatchEntries = 9

// How the sink watches SNS.
const (
	probeInterval = 2 * time.Second
	retryInterval = 250 * time.Millisecond
	probeTimeout  = 5 * time.Second
)

// Config configures a Sink.
type Config struct {
	// TopicARN is the topic every row goes to (SNS_TOPIC_ARN), or, ending
	// in a colon after the account (arn:aws:sns:REGION:ACCOUNT:), the
	// account and region whose topics the rows' topics name.
	TopicARN string
	// TopicPrefix begins the topic name of each row's topic
	// (SNS_TOPIC_PREFIX); only with a TopicARN ending in a colon.
	TopicPrefix string
	// Region is the AWS region of the SNS endpoint (SNS_REGION). Empty:
	// TopicARN's, which is the topics' region.
	Region string
	// Endpoint replaces SNS's endpoint (SNS_ENDPOINT): LocalStack, fauxqs,
	// a VPC endpoint.
	Endpoint string
	// Timeout bounds one Deliver, the SDK's retries included (SNS_TIMEOUT);
	// messages not acknowledged by then are retried. Default
	// TimeoutDefault.
	Timeout time.Duration
	// FIFODefaultGroup is the MessageGroupId of unkeyed rows on FIFO
	// topics (SNS_FIFO_DEFAULT_GROUP). Empty: each unkeyed row is a group
	// of its own (its idempotency key), so unkeyed rows keep no order.
	FIFODefaultGroup string
	// Credentials, when set, replace the AWS credential chain (tests).
	Credentials aws.CredentialsProvider
	// AppID is sent in the User-Agent.
	AppID string
	// Logger receives the sink's events. Default slog.Default().
	Logger *slog.Logger
}

// Sink publishes to SNS. It is safe for concurrent use.
type Sink struct {
	cfg   Config
	cl    *sns.Client
	arn   TopicARN // the parsed TopicARN
	fixed string   // the fixed topic's ARN, "" for a topic per row
	log   *slog.Logger

	// down is nil while SNS answers, else why deliveries are not
	// attempted (wrapping sinks.ErrNotAttempted).
	down atomic.Pointer[error]
	// lastErr is the last probe's error.
	lastErr atomic.Pointer[error]
	// throttledUntil is when a throttled request's pause ends, in Unix
	// nanoseconds.
	throttledUntil atomic.Int64
	// lastOK is when SNS last answered, in Unix nanoseconds.
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

var errNotConnectedYet = fmt.Errorf("%w: SNS has not answered yet", sinks.ErrNotAttempted)

// New returns a sink for the topics cfg names. It does not wait for SNS:
// a background probe watches it, and the sink reports itself unavailable
// until it answers.
func New(cfg Config) (*Sink, error) {
	arn, err := ParseTopicARN(cfg.TopicARN)
	if err != nil {
		return nil, fmt.Errorf("new SNS sink: topic ARN: %w", err)
	}
	if arn.Name != "" && cfg.TopicPrefix != "" {
		return nil, fmt.Errorf("new SNS sink: a topic prefix with the ARN of one topic")
	}
	if err := ValidatePrefix(cfg.TopicPrefix); err != nil {
		return nil, fmt.Errorf("new SNS sink: topic prefix: %w", err)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	if cfg.Timeout < TimeoutMin {
		return nil, fmt.Errorf("new SNS sink: timeout %s is shorter than a second", cfg.Timeout)
	}
	log := cmp.Or(cfg.Logger, slog.Default()).With("sink", "sns")
	opts := []func(*config.LoadOptions) error{
		config.WithAppID(cmp.Or(cfg.AppID, "outbox-relay")),
		config.WithRegion(cmp.Or(cfg.Region, arn.Region)),
	}
	if cfg.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("new SNS sink: AWS configuration: %w", err)
	}
	cl := sns.NewFromConfig(awsCfg, func(o *sns.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	s := &Sink{
		cfg: cfg, cl: cl, arn: arn, log: log.With("region", awsCfg.Region),
		wake:    make(chan struct{}, 1),
		watched: make(chan struct{}),
	}
	if arn.Name != "" {
		s.fixed = cfg.TopicARN
	}
	s.down.Store(&errNotConnectedYet)
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.watch(ctx)
	return s, nil
}

// Available reports whether the sink can deliver now: nil while SNS
// answers and does not throttle the relay. It never blocks.
func (s *Sink) Available() error {
	if err := s.down.Load(); err != nil {
		return *err
	}
	if until := s.throttledUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return fmt.Errorf("%w: SNS throttles the relay; sending again shortly", sinks.ErrNotAttempted)
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

// watch probes SNS until ctx ends: at once, then every probeInterval while
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
				s.log.Info("SNS answers")
			}
		} else {
			prev := s.lastErr.Swap(&err)
			down := fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err)
			s.down.Store(&down)
			if wasUp || first || prev == nil || (*prev).Error() != err.Error() {
				s.log.Warn("SNS cannot take deliveries; rows wait", "err", err)
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

// probe asks SNS for the fixed topic's attributes, or lists topics, and
// says why deliveries cannot go when they cannot: SNS unreachable, the
// credentials refused, the fixed topic missing or denied. Any other
// answer proves SNS reachable.
func (s *Sink) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if s.fixed != "" {
		_, err := s.cl.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(s.fixed)})
		if err == nil {
			return nil
		}
		if noTopic(err) {
			return fmt.Errorf("%w: SNS topic %s (SNS_TOPIC_ARN): %w", errNoTopic, s.fixed, err)
		}
		return probeError(err)
	}
	_, err := s.cl.ListTopics(ctx, &sns.ListTopicsInput{})
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if errors.As(err, &api) && !authCode(api.ErrorCode()) {
		return nil // an answer: SNS is there (ListTopics may be denied)
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
	return fmt.Errorf("SNS does not answer: %w", err)
}

var (
	errAuthFailed = errors.New("SNS refuses the relay's credentials (the AWS credential chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, or instance metadata)")
	errDenied     = errors.New("SNS denies the relay access to the topic (its IAM policy needs sns:GetTopicAttributes and sns:Publish)")
)

// batch is one PublishBatch: its entries and their messages' indexes.
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
	// Each topic's messages, in their order.
	var arns []string
	byTopic := map[string][]int{}
	for i := range msgs {
		arn := s.fixed
		if arn == "" {
			n, err := TopicName(s.cfg.TopicPrefix, msgs[i].Topic)
			if err != nil {
				errs[i] = sinks.Permanent(fmt.Errorf("topic %s names no SNS topic: %w", awsmsg.Clipped(msgs[i].Topic), err))
				continue
			}
			arn = s.arn.With(n)
		}
		if _, ok := byTopic[arn]; !ok {
			arns = append(arns, arn)
		}
		byTopic[arn] = append(byTopic[arn], i)
	}
	var wg sync.WaitGroup
	for _, arn := range arns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.deliverTopic(ctx, arn, msgs, byTopic[arn], errs)
		}()
	}
	wg.Wait()
	return errs
}

// deliverTopic publishes the messages idx of msgs to topic arn, in batches
// sent one after the other, so that a FIFO group's messages keep their
// order; a message whose group had a message fail before it is not sent.
func (s *Sink) deliverTopic(ctx context.Context, arn string, msgs []sinks.Message, idx []int, errs []error) {
	name := arn[len(s.arn.With("")):]
	fifo := isFIFO(name)
	// PublishBatch travels as a form whose entries are numbered from 1 and
	// whose fields the SDK sorts as text, so entry 10 comes before entry 2:
	// on a FIFO topic, whose order within a batch is the entries', nine
	// entries keep the text order and the numeric one the same, whichever
	// SNS reads (fauxqs reads the text order).
	maxEntries := MaxBatchEntries
	if fifo {
		maxEntries = maxFIFOBatchEntries
	}
	var batches []*batch
	cur := &batch{}
	for _, i := range idx {
		e, err := s.build(&msgs[i], fifo)
		if err != nil {
			errs[i] = err
			continue
		}
		if len(cur.entries) == maxEntries || cur.size+e.size > MaxMessageSize {
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
			case fifo && failedGroups[e.group]:
				errs[i] = fmt.Errorf("%w: an earlier message of its FIFO group failed in this batch", sinks.ErrNotAttempted)
			default:
				send = append(send, j)
			}
		}
		if len(send) == 0 {
			continue
		}
		in := &sns.PublishBatchInput{TopicArn: aws.String(arn)}
		for _, j := range send {
			e := b.entries[j]
			re := types.PublishBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), Message: aws.String(e.body), MessageAttributes: e.attrs}
			if e.group != "" {
				re.MessageGroupId = aws.String(e.group)
			}
			if e.dedup != "" {
				re.MessageDeduplicationId = aws.String(e.dedup)
			}
			in.PublishBatchRequestEntries = append(in.PublishBatchRequestEntries, re)
		}
		out, err := s.cl.PublishBatch(ctx, in)
		if err != nil {
			rerr := requestError(name, err)
			switch {
			case noTopic(err):
				if arn == s.fixed {
					s.poke() // the probe says so, and the rows wait
				}
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
				stopped = fmt.Errorf("%w: an earlier request to SNS topic %s failed: %w", sinks.ErrNotAttempted, name, err)
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
			e := entryError(name, f)
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
				errs[b.idx[j]] = fmt.Errorf("SNS gave no outcome for the message to topic %s", name)
				failedGroups[b.entries[j].group] = true
			}
		}
	}
}

func isThrottled(err error) bool {
	_, ok := sinks.RetryDelay(err)
	return ok
}

// wakeOnTransport asks for a probe when err did not come from SNS (no
// answer): it may be gone.
func (s *Sink) wakeOnTransport(err error) {
	var api smithy.APIError
	if !errors.As(err, &api) {
		s.poke()
	}
}
