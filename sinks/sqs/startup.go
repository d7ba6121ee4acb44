package sqs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Start-up problems CheckStartup reports (outbox_relay_sink_problem).
const (
	ProblemAuthFailed   = "auth_failed"
	ProblemNoQueue      = "no_queue"
	ProblemAccessDenied = "access_denied"
	ProblemNoQueues     = "no_queues"
)

// CheckStartup waits until SQS answers, then checks what can be known
// before the first row: with one queue, that it exists and the relay may
// read it (its MaximumMessageSize, which the sink enforces, is read then);
// with a queue per topic, that some queue starts with QueuePrefix (when
// the relay may list queues). Refused credentials are reported at once; an
// unreachable SQS is waited for until ctx ends (Available reports it).
func (s *Sink) CheckStartup(ctx context.Context) ([]sinks.Problem, error) {
	for s.Available() != nil {
		if p := s.lastErr.Load(); p != nil {
			err := *p
			switch {
			case errors.Is(err, errAuthFailed):
				return []sinks.Problem{{Code: ProblemAuthFailed, Message: "SQS refuses the relay's credentials: nothing is delivered until the AWS credential chain gives valid ones", Attrs: []any{"err", err}}}, nil
			case errors.Is(err, errDenied):
				return []sinks.Problem{{Code: ProblemAccessDenied, Message: "SQS denies the relay access to the queue of SQS_QUEUE_URL: grant sqs:GetQueueAttributes and sqs:SendMessage (and kms:GenerateDataKey, kms:Decrypt for an encrypted queue)", Attrs: []any{"queue", s.qs.fixed, "err", err}}}, nil
			case noQueue(err):
				return []sinks.Problem{{Code: ProblemNoQueue, Message: "the queue of SQS_QUEUE_URL does not exist: rows wait until it is created", Attrs: []any{"queue", s.qs.fixed}}}, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for SQS: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if s.qs.fixed != "" {
		q, err := s.qs.get(ctx, s.qs.fixed)
		if err != nil {
			return nil, err
		}
		s.log.Info("SQS queue found", "queue", q.name, "fifo", q.fifo, "max_message_size", q.maxSize)
		return nil, nil
	}
	out, err := s.cl.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(s.cfg.QueuePrefix), MaxResults: aws.Int32(10)})
	if err != nil {
		var api smithy.APIError
		if errors.As(err, &api) && deniedCode(api.ErrorCode()) {
			s.log.Info("the relay may not list SQS queues (sqs:ListQueues), so the start-up check cannot tell whether the rows' queues exist; a row whose queue does not exist is dead-lettered")
			return nil, nil
		}
		return nil, fmt.Errorf("list SQS queues: %w", err)
	}
	if len(out.QueueUrls) == 0 {
		return []sinks.Problem{{
			Code:    ProblemNoQueues,
			Message: "no SQS queue starts with SQS_QUEUE_PREFIX: a row whose queue does not exist is dead-lettered",
			Attrs:   []any{"prefix", s.cfg.QueuePrefix},
		}}, nil
	}
	return nil, nil
}
