package sns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/smithy-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Start-up problems CheckStartup reports (outbox_relay_sink_problem).
const (
	ProblemAuthFailed   = "auth_failed"
	ProblemNoTopic      = "no_topic"
	ProblemAccessDenied = "access_denied"
	ProblemNoTopics     = "no_topics"
)

// CheckStartup waits until SNS answers, then checks what can be known
// before the first row: with one topic, that it exists and the relay may
// read it; with a topic per row, that some topic of the account starts
// with TopicPrefix (when the relay may list topics). Refused credentials
// are reported at once; an unreachable SNS is waited for until ctx ends
// (Available reports it).
func (s *Sink) CheckStartup(ctx context.Context) ([]sinks.Problem, error) {
	for s.Available() != nil {
		if p := s.lastErr.Load(); p != nil {
			err := *p
			switch {
			case errors.Is(err, errAuthFailed):
				return []sinks.Problem{{Code: ProblemAuthFailed, Message: "SNS refuses the relay's credentials: nothing is delivered until the AWS credential chain gives valid ones", Attrs: []any{"err", err}}}, nil
			case errors.Is(err, errDenied):
				return []sinks.Problem{{Code: ProblemAccessDenied, Message: "SNS denies the relay access to the topic of SNS_TOPIC_ARN: grant sns:GetTopicAttributes and sns:Publish (and kms:GenerateDataKey, kms:Decrypt for an encrypted topic)", Attrs: []any{"topic", s.fixed, "err", err}}}, nil
			case errors.Is(err, errNoTopic):
				return []sinks.Problem{{Code: ProblemNoTopic, Message: "the topic of SNS_TOPIC_ARN does not exist: rows wait until it is created", Attrs: []any{"topic", s.fixed}}}, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for SNS: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if s.fixed != "" {
		out, err := s.cl.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(s.fixed)})
		if err != nil {
			return nil, fmt.Errorf("read SNS topic %s: %w", s.fixed, err)
		}
		s.log.Info("SNS topic found", "topic", s.fixed, "fifo", isFIFO(s.arn.Name) || out.Attributes["FifoTopic"] == "true")
		return nil, nil
	}
	prefix := s.arn.With(s.cfg.TopicPrefix)
	in := &sns.ListTopicsInput{}
	for range 20 { // 2,000 topics at most: enough to find one, not a crawl
		out, err := s.cl.ListTopics(ctx, in)
		if err != nil {
			var api smithy.APIError
			if errors.As(err, &api) && deniedCode(api.ErrorCode()) {
				s.log.Info("the relay may not list SNS topics (sns:ListTopics), so the start-up check cannot tell whether the rows' topics exist; a row whose topic does not exist is dead-lettered")
				return nil, nil
			}
			return nil, fmt.Errorf("list SNS topics: %w", err)
		}
		for _, t := range out.Topics {
			if strings.HasPrefix(aws.ToString(t.TopicArn), prefix) {
				return nil, nil
			}
		}
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	return []sinks.Problem{{
		Code:    ProblemNoTopics,
		Message: "no SNS topic of SNS_TOPIC_ARN's account and region starts with SNS_TOPIC_PREFIX: a row whose topic does not exist is dead-lettered",
		Attrs:   []any{"prefix", prefix},
	}}, nil
}
