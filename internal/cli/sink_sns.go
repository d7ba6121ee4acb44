package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
	snssink "github.com/outbox-relay/outbox-relay/sinks/sns"
)

// snsKind is the sns sink (sinks/sns).
var snsKind = sinkKind{
	name:      "sns",
	prefix:    "SNS_",
	enabledBy: "SNS_TOPIC_ARN",
	timeout:   "SNS_TIMEOUT",
	problems:  []string{snssink.ProblemAuthFailed, snssink.ProblemNoTopic, snssink.ProblemAccessDenied, snssink.ProblemNoTopics},
	env:       func() sinkEnv { return new(snsEnv) },
}

// snsEnv is the sns sink's configuration. Credentials are AWS's own
// variables, read by the AWS SDK's credential chain (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_WEB_IDENTITY_TOKEN_FILE
// and AWS_ROLE_ARN, AWS_PROFILE, instance metadata), not by the relay.
type snsEnv struct {
	TopicARN         string        `env:"SNS_TOPIC_ARN" doc:"Amazon SNS topic every row is published to; enables the sns sink. Ending in a colon after the account (arn:aws:sns:REGION:ACCOUNT:), each row goes to the topic its topic names, under SNS_TOPIC_PREFIX. Credentials come from the AWS credential chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, web identity for IRSA and EKS Pod Identity, instance metadata)." allowed:"a topic ARN, arn:aws:sns:REGION:ACCOUNT:TOPIC (TOPIC ends in .fifo for a FIFO topic), or an account's and region's, arn:aws:sns:REGION:ACCOUNT:"`
	TopicPrefix      string        `env:"SNS_TOPIC_PREFIX" doc:"Begins the topic name of each row's topic when SNS_TOPIC_ARN ends in a colon: the name is the prefix and the topic with each . as -, a final .fifo kept (events- and orders.created: events-orders-created). A row whose SNS topic does not exist, or whose name SNS refuses, is dead-lettered." allowed:"empty, or up to 255 of ASCII letters, digits, - and _; only with an SNS_TOPIC_ARN ending in a colon"`
	Region           string        `env:"SNS_REGION" doc:"AWS region of the SNS endpoint. Empty: SNS_TOPIC_ARN's, the topics' region." allowed:"an AWS region, like eu-west-1"`
	Endpoint         string        `env:"SNS_ENDPOINT" doc:"SNS endpoint to use instead of AWS's: a VPC endpoint, or an emulator (LocalStack, fauxqs)." allowed:"an http(s) URL"`
	Timeout          time.Duration `env:"SNS_TIMEOUT" envDefault:"10s" doc:"How long one delivery's requests to SNS may take, the SDK's retries included, before its messages are retried." allowed:"a duration of at least 1s and at most 60% of RELAY_LEASE"`
	FIFODefaultGroup string        `env:"SNS_FIFO_DEFAULT_GROUP" doc:"MessageGroupId of rows without a key on FIFO topics, which puts them in one ordered group. Empty: each unkeyed row is a group of its own (its idempotency key), so they keep no order and never wait for each other." allowed:"empty, or a value mapped as a key is (up to 128 printable ASCII characters are kept, others hashed)"`
}

func (e *snsEnv) deliveryTimeout() time.Duration { return e.Timeout }

// validate checks the sns settings.
func (e *snsEnv) validate(c *config) error {
	fixed := ""
	if e.TopicARN != "" {
		a, err := snssink.ParseTopicARN(e.TopicARN)
		if err != nil {
			return c.refuse("SNS_TOPIC_ARN", err.Error())
		}
		fixed = a.Name
	}
	if e.TopicPrefix != "" {
		if err := snssink.ValidatePrefix(e.TopicPrefix); err != nil {
			return c.refuse("SNS_TOPIC_PREFIX", err.Error())
		}
		if fixed != "" {
			return c.refuse("SNS_TOPIC_PREFIX", "set with the ARN of one topic in SNS_TOPIC_ARN: end SNS_TOPIC_ARN after the account (a colon) for a topic per row, or unset SNS_TOPIC_PREFIX")
		}
	}
	if e.Endpoint != "" {
		u, err := url.Parse(e.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c.refuse("SNS_ENDPOINT", "not an http(s) URL")
		}
	}
	if e.Timeout < snssink.TimeoutMin {
		return c.refuse("SNS_TIMEOUT", "shorter than a second")
	}
	return nil
}

func (e *snsEnv) settings(_ *config, version string) any {
	return snssink.Config{
		TopicARN:         e.TopicARN,
		TopicPrefix:      e.TopicPrefix,
		Region:           e.Region,
		Endpoint:         e.Endpoint,
		Timeout:          e.Timeout,
		FIFODefaultGroup: e.FIFODefaultGroup,
		AppID:            "outbox-relay/" + version,
	}
}

func (e *snsEnv) open(settings any, log *slog.Logger) (sinks.Sink, error) {
	cfg := settings.(snssink.Config)
	cfg.Logger = log
	s, err := snssink.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("open the sns sink: %w", err)
	}
	return s, nil
}
