package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsmsg"
)

// QueueNameMax is the longest queue name SQS takes, ".fifo" included.
const QueueNameMax = 80

// FIFOSuffix ends the name of every FIFO queue.
const FIFOSuffix = ".fifo"

// queueTTL is how long a queue's URL and attributes are trusted before
// they are read again.
const queueTTL = 5 * time.Minute

// QueueName returns the name of the queue a row of topic goes to under
// prefix: prefix and the topic with each '.' turned into '-', keeping a
// final ".fifo" (a FIFO queue). A name SQS cannot take (longer than 80
// characters, or with a character other than ASCII letters, digits, '-'
// and '_') is an error: the row is dead-lettered. Topics that differ only
// in '.' and '-' (orders.created, orders-created) name the same queue.
func QueueName(prefix, topic string) (string, error) {
	base, suffix := topic, ""
	if strings.HasSuffix(topic, FIFOSuffix) {
		base, suffix = strings.TrimSuffix(topic, FIFOSuffix), FIFOSuffix
	}
	name := prefix + strings.ReplaceAll(base, ".", "-") + suffix
	if err := ValidateQueueName(name); err != nil {
		return "", err
	}
	return name, nil
}

// ValidateQueueName returns why SQS refuses name as a queue name, nil when
// it takes it.
func ValidateQueueName(name string) error {
	base := strings.TrimSuffix(name, FIFOSuffix)
	switch {
	case base == "":
		return errors.New("an SQS queue name needs at least one character before .fifo")
	case len(name) > QueueNameMax:
		return fmt.Errorf("the SQS queue name of %d characters is longer than %d", len(name), QueueNameMax)
	case !nameChars(base):
		return fmt.Errorf("SQS queue name %s has a character other than ASCII letters, digits, '-' and '_'", awsmsg.Clipped(name))
	}
	return nil
}

// ValidatePrefix returns why prefix cannot begin queue names.
func ValidatePrefix(prefix string) error {
	if len(prefix) > QueueNameMax-1 {
		return fmt.Errorf("longer than %d characters", QueueNameMax-1)
	}
	if !nameChars(prefix) {
		return errors.New("only ASCII letters, digits, '-' and '_' may name an SQS queue")
	}
	return nil
}

func nameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ParseQueueURL splits an SQS queue URL (https://sqs.REGION.amazonaws.com/
// ACCOUNT/NAME) into its account and queue name; name is "" for the
// account's URL ending in a slash (https://sqs.REGION.amazonaws.com/ACCOUNT/),
// which makes each row's queue name from its topic.
func ParseQueueURL(raw string) (account, name string, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", "", errors.New("not an http(s) URL like https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo")
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 2 || parts[0] == "" {
		return "", "", errors.New("the path is not /ACCOUNT/QUEUE, or /ACCOUNT/ for a queue per topic")
	}
	if parts[1] != "" {
		if err := ValidateQueueName(parts[1]); err != nil {
			return "", "", err
		}
	}
	return parts[0], parts[1], nil
}

// RegionOf returns the region of an AWS SQS URL's host
// (sqs.REGION.amazonaws.com, or REGION.queue.amazonaws.com), "" for other
// hosts.
func RegionOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	labels := strings.Split(u.Hostname(), ".")
	switch {
	case len(labels) >= 4 && labels[0] == "sqs" && labels[2] == "amazonaws":
		return labels[1]
	case len(labels) >= 4 && labels[1] == "queue" && labels[2] == "amazonaws":
		return labels[0]
	}
	return ""
}

// queue is what the sink knows of one queue.
type queue struct {
	name    string
	url     string
	fifo    bool
	maxSize int // MaximumMessageSize
	read    time.Time
}

// queues resolves queue names to what the sink knows of them, once per
// queueTTL: GetQueueUrl (unless the URL is known) and GetQueueAttributes.
type queues struct {
	cl       *sqs.Client
	account  string
	mu       sync.Mutex
	known    map[string]*queue
	fixed    string // SQS_QUEUE_URL's queue name, "" per topic
	fixedURL string
}

// get returns queue name, reading it when it is not known or too old. An
// error wrapping errNoQueue means SQS says it does not exist.
func (qs *queues) get(ctx context.Context, name string) (*queue, error) {
	qs.mu.Lock()
	q := qs.known[name]
	qs.mu.Unlock()
	if q != nil && time.Since(q.read) < queueTTL {
		return q, nil
	}
	q, err := qs.read(ctx, name)
	if err != nil {
		if errors.Is(err, errNoQueue) {
			qs.forget(name)
		}
		return nil, err
	}
	qs.mu.Lock()
	qs.known[name] = q
	qs.mu.Unlock()
	return q, nil
}

// forget drops what the sink knows of queue name.
func (qs *queues) forget(name string) {
	qs.mu.Lock()
	delete(qs.known, name)
	qs.mu.Unlock()
}

var errNoQueue = errors.New("the SQS queue does not exist")

func (qs *queues) read(ctx context.Context, name string) (*queue, error) {
	u := qs.fixedURL
	if name != qs.fixed || u == "" {
		in := &sqs.GetQueueUrlInput{QueueName: aws.String(name)}
		if qs.account != "" {
			in.QueueOwnerAWSAccountId = aws.String(qs.account)
		}
		out, err := qs.cl.GetQueueUrl(ctx, in)
		if err != nil {
			return nil, queueError(name, err)
		}
		u = aws.ToString(out.QueueUrl)
	}
	out, err := qs.cl.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(u),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize, types.QueueAttributeNameFifoQueue},
	})
	if err != nil {
		return nil, queueError(name, err)
	}
	size, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)])
	if err != nil || size < 1024 {
		return nil, fmt.Errorf("SQS queue %s reports MaximumMessageSize %q", name, out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)])
	}
	fifo := strings.HasSuffix(name, FIFOSuffix) || out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"
	return &queue{name: name, url: u, fifo: fifo, maxSize: size, read: time.Now()}, nil
}

// queueError explains the failure to read queue name.
func queueError(name string, err error) error {
	if noQueue(err) {
		return sinks.Permanent(fmt.Errorf("%w: %s (create it, or route the row elsewhere): %w", errNoQueue, name, err))
	}
	return fmt.Errorf("read SQS queue %s: %w", name, err)
}
