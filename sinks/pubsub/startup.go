package pubsub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/iam/apiv1/iampb"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Start-up problems CheckStartup reports (outbox_relay_sink_problem).
const (
	ProblemAuthFailed    = "auth_failed"
	ProblemNoTopic       = "no_topic"
	ProblemNoTopics      = "no_topics"
	ProblemPublishDenied = "publish_denied"
)

// publishPermission is the permission a publish needs on its topic.
const publishPermission = "pubsub.topics.publish"

// topicsListMax bounds the topics CheckStartup reads when it looks for
// one under the prefix.
const topicsListMax = 10000

// CheckStartup waits until Pub/Sub answers, then checks what can be known
// before the first row arrives: that it takes the credentials; with
// PUBSUB_TOPIC, that the topic exists and the relay's principal may
// publish to it; with PUBSUB_TOPIC_PREFIX, that some topic of the project
// starts with it. Which topics rows will name cannot be known in advance.
func (s *Sink) CheckStartup(ctx context.Context) ([]sinks.Problem, error) {
	for s.Available() != nil {
		if p := s.health.lastErr.Load(); p != nil {
			switch {
			case errors.Is(*p, errAuthFailed):
				return []sinks.Problem{{
					Code:    ProblemAuthFailed,
					Message: "Pub/Sub refuses the relay's credentials: nothing is delivered until PUBSUB_CREDENTIALS, or the workload identity's service account, is fixed",
					Attrs:   []any{"err", *p},
				}}, nil
			case errors.Is(*p, errTopicMissing):
				return []sinks.Problem{{
					Code:    ProblemNoTopic,
					Message: "the Pub/Sub topic PUBSUB_TOPIC does not exist: nothing is delivered until it is created",
					Attrs:   []any{"topic", s.cfg.Topic},
				}}, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for Pub/Sub: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if s.cfg.Topic != "" {
		return s.checkPublish(ctx, s.cfg.Topic)
	}
	if s.cfg.TopicPrefix == "" {
		s.log.Info("PUBSUB_TOPIC_PREFIX is empty, so the start-up check cannot tell which topics the relay publishes to; a publish to a missing topic is dead-lettered")
		return nil, nil
	}
	n, err := s.countTopics(ctx, s.cfg.TopicPrefix)
	switch {
	case status.Code(err) == codes.PermissionDenied:
		s.log.Info("the relay's principal may not list the project's topics (pubsub.topics.list), so the start-up check cannot tell whether topics exist under the prefix", "prefix", s.cfg.TopicPrefix)
		return nil, nil
	case err != nil:
		return nil, err
	case n == 0:
		return []sinks.Problem{{
			Code:    ProblemNoTopics,
			Message: "no Pub/Sub topic of the project starts with PUBSUB_TOPIC_PREFIX: a publish to a missing topic is dead-lettered",
			Attrs:   []any{"prefix", s.cfg.TopicPrefix},
		}}, nil
	}
	s.log.Info("Pub/Sub has topics under the prefix", "prefix", s.cfg.TopicPrefix, "num_topics", n)
	return nil, nil
}

// checkPublish asks whether the relay's principal may publish to topic
// ID id. An emulator has no IAM: its answer is taken as a yes.
func (s *Sink) checkPublish(ctx context.Context, id string) ([]sinks.Problem, error) {
	resp, err := s.client.TopicAdminClient.TestIamPermissions(ctx, &iampb.TestIamPermissionsRequest{
		Resource: s.topicName(id), Permissions: []string{publishPermission},
	})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return nil, nil
	case status.Code(err) == codes.NotFound:
		return []sinks.Problem{{Code: ProblemNoTopic, Message: "the Pub/Sub topic PUBSUB_TOPIC does not exist: nothing is delivered until it is created", Attrs: []any{"topic", id}}}, nil
	case err != nil:
		return nil, fmt.Errorf("test the permission to publish to Pub/Sub topic %s: %w", id, err)
	case !slices.Contains(resp.GetPermissions(), publishPermission):
		return []sinks.Problem{{
			Code:    ProblemPublishDenied,
			Message: "the relay's principal may not publish to the Pub/Sub topic PUBSUB_TOPIC: grant it roles/pubsub.publisher on the topic; publishes are retried until then",
			Attrs:   []any{"topic", id},
		}}, nil
	}
	return nil, nil
}

// countTopics counts the project's topics whose ID starts with prefix,
// reading at most topicsListMax.
func (s *Sink) countTopics(ctx context.Context, prefix string) (int, error) {
	it := s.client.TopicAdminClient.ListTopics(ctx, &pubsubpb.ListTopicsRequest{Project: "projects/" + s.cfg.Project})
	n := 0
	for range topicsListMax {
		t, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("list Pub/Sub topics: %w", err)
		}
		if strings.HasPrefix(t.GetName(), s.topicName(prefix)) {
			n++
		}
	}
	return n, nil
}
