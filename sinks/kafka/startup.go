package kafka

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Start-up problems CheckStartup reports (outbox_relay_sink_problem).
const (
	ProblemAuthFailed   = "auth_failed"
	ProblemNoProducerID = "no_producer_id"
	ProblemNoTopics     = "no_topics"
)

// CheckStartup waits until a broker answers, then checks what can be known
// before the first row arrives: that the cluster takes the sink's
// credentials, that it grants an idempotent producer id, and, when
// TopicPrefix is set, that some topic starts with it. Which topics rows
// will name cannot be known in advance: a produce to a missing topic is
// retried, and its error names the topic. Refused credentials are reported
// at once; an unreachable cluster is waited for until ctx ends (Available
// reports it meanwhile).
func (s *Sink) CheckStartup(ctx context.Context) ([]sinks.Problem, error) {
	for s.Available() != nil {
		if p := s.health.lastErr.Load(); p != nil && authRefused(*p) {
			return []sinks.Problem{{
				Code:    ProblemAuthFailed,
				Message: "Kafka refuses the relay's credentials: nothing is delivered until KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD are fixed",
				Attrs:   []any{"err", *p},
			}}, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for a Kafka broker: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}

	var problems []sinks.Problem
	if _, _, err := s.cl.ProducerID(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("load a producer id: %w", ctx.Err())
		}
		problems = append(problems, sinks.Problem{
			Code:    ProblemNoProducerID,
			Message: "Kafka refuses the relay an idempotent producer id: every produce fails until it grants one (before Kafka 3.0 this needs IDEMPOTENT_WRITE on the cluster)",
			Attrs:   []any{"err", err},
		})
	}

	if s.cfg.TopicPrefix == "" {
		s.log.Info("KAFKA_TOPIC_PREFIX is empty, so the start-up check cannot tell which topics the relay writes to; produces to a missing topic are retried and logged")
		return problems, nil
	}
	topics, err := s.topics(ctx)
	if err != nil {
		return problems, err
	}
	n := 0
	for _, t := range topics {
		if strings.HasPrefix(t, s.cfg.TopicPrefix) {
			n++
		}
	}
	if n == 0 {
		problems = append(problems, sinks.Problem{
			Code: ProblemNoTopics,
			Message: "no Kafka topic starts with KAFKA_TOPIC_PREFIX (or the relay's user may not describe them): " +
				"a produce to a missing topic fails and is retried until the topic exists",
			Attrs: []any{"prefix", s.cfg.TopicPrefix},
		})
	} else {
		s.log.Info("Kafka has topics under the prefix", "prefix", s.cfg.TopicPrefix, "num_topics", n)
	}
	return problems, nil
}

// topics lists the topics the cluster shows the sink.
func (s *Sink) topics(ctx context.Context) ([]string, error) {
	req := kmsg.NewPtrMetadataRequest() // no topics: all of them
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return nil, fmt.Errorf("list Kafka topics: %w", err)
	}
	var out []string
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			out = append(out, *t.Topic)
		}
	}
	return out, nil
}
