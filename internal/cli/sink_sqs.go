package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
	sqssink "github.com/outbox-relay/outbox-relay/sinks/sqs"
)

// sqsKind is the sqs sink (sinks/sqs).
var sqsKind = sinkKind{
	name:      "sqs",
	prefix:    "SQS_",
	enabledBy: "SQS_QUEUE_URL",
	timeout:   "SQS_TIMEOUT",
	problems:  []string{sqssink.ProblemAuthFailed, sqssink.ProblemNoQueue, sqssink.ProblemAccessDenied, sqssink.ProblemNoQueues},
	env:       func() sinkEnv { return new(sqsEnv) },
}

// sqsEnv is the sqs sink's configuration. Credentials are AWS's own
// variables, read by the AWS SDK's credential chain (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_WEB_IDENTITY_TOKEN_FILE
// and AWS_ROLE_ARN, AWS_PROFILE, instance metadata), not by the relay.
type sqsEnv struct {
	QueueURL         string        `env:"SQS_QUEUE_URL" doc:"Amazon SQS queue every row goes to; enables the sqs sink. Ending in a slash (the account's URL), each row goes to the queue its topic names, under SQS_QUEUE_PREFIX. Credentials come from the AWS credential chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, web identity for IRSA and EKS Pod Identity, instance metadata)." allowed:"a queue URL, https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE (QUEUE ends in .fifo for a FIFO queue), or an account's, https://sqs.REGION.amazonaws.com/ACCOUNT/"`
	QueuePrefix      string        `env:"SQS_QUEUE_PREFIX" doc:"Begins the queue name of each row's topic when SQS_QUEUE_URL is an account's: the name is the prefix and the topic with each . as -, a final .fifo kept (events- and orders.created: events-orders-created). A row whose queue does not exist, or whose name SQS refuses, is dead-lettered." allowed:"empty, or up to 79 of ASCII letters, digits, - and _; only with an SQS_QUEUE_URL ending in a slash"`
	Region           string        `env:"SQS_REGION" doc:"AWS region of the queues. Empty: the AWS chain's (AWS_REGION, the shared config), else the one in SQS_QUEUE_URL's host." allowed:"an AWS region, like eu-west-1"`
	Endpoint         string        `env:"SQS_ENDPOINT" doc:"SQS endpoint to use instead of AWS's: a VPC endpoint, or an emulator (LocalStack, ElasticMQ, fauxqs)." allowed:"an http(s) URL"`
	Timeout          time.Duration `env:"SQS_TIMEOUT" envDefault:"10s" doc:"How long one delivery's requests to SQS may take, the SDK's retries included, before its messages are retried." allowed:"a duration of at least 1s and at most 60% of RELAY_LEASE"`
	FIFODefaultGroup string        `env:"SQS_FIFO_DEFAULT_GROUP" doc:"MessageGroupId of rows without a key on FIFO queues, which puts them in one ordered group. Empty: each unkeyed row is a group of its own (its idempotency key), so they keep no order and never wait for each other." allowed:"empty, or a value mapped as a key is (up to 128 printable ASCII characters are kept, others hashed)"`
	FairQueues       bool          `env:"SQS_FAIR_QUEUES" envDefault:"false" doc:"On standard queues, send a keyed row's key as its MessageGroupId, which makes SQS fair queues share consumers among keys. Standard queues keep no order either way." allowed:"true or false"`
}

func (e *sqsEnv) deliveryTimeout() time.Duration { return e.Timeout }

// validate checks the sqs settings.
func (e *sqsEnv) validate(c *config) error {
	fixed := ""
	if e.QueueURL != "" {
		_, name, err := sqssink.ParseQueueURL(e.QueueURL)
		if err != nil {
			return c.refuse("SQS_QUEUE_URL", err.Error())
		}
		fixed = name
	}
	if e.QueuePrefix != "" {
		if err := sqssink.ValidatePrefix(e.QueuePrefix); err != nil {
			return c.refuse("SQS_QUEUE_PREFIX", err.Error())
		}
		if fixed != "" {
			return c.refuse("SQS_QUEUE_PREFIX", "set with the URL of one queue in SQS_QUEUE_URL: end SQS_QUEUE_URL after the account (a slash) for a queue per topic, or unset SQS_QUEUE_PREFIX")
		}
	}
	if e.Endpoint != "" {
		u, err := url.Parse(e.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c.refuse("SQS_ENDPOINT", "not an http(s) URL")
		}
	}
	if e.Timeout < sqssink.TimeoutMin {
		return c.refuse("SQS_TIMEOUT", "shorter than a second")
	}
	return nil
}

func (e *sqsEnv) settings(_ *config, version string) any {
	return sqssink.Config{
		QueueURL:         e.QueueURL,
		QueuePrefix:      e.QueuePrefix,
		Region:           e.Region,
		Endpoint:         e.Endpoint,
		Timeout:          e.Timeout,
		FIFODefaultGroup: e.FIFODefaultGroup,
		FairQueues:       e.FairQueues,
		AppID:            "outbox-relay/" + version,
	}
}

func (e *sqsEnv) open(settings any, log *slog.Logger) (sinks.Sink, error) {
	cfg := settings.(sqssink.Config)
	cfg.Logger = log
	s, err := sqssink.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("open the sqs sink: %w", err)
	}
	return s, nil
}
