package pubsub

import (
	"context"
	"errors"
	"fmt"

	ps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// outcome turns the result of p's publish into its outcome.
func (s *Sink) outcome(ctx context.Context, p *sent, err error) error {
	if err == nil {
		s.health.acked()
		return nil
	}
	var paused ps.ErrPublishingPaused
	if errors.As(err, &paused) {
		// Never sent: an earlier message of the key failed, and the key
		// is resumed once that one has its outcome.
		return fmt.Errorf("%w: ordering key %q is paused after an earlier message of it failed; it goes after that one", sinks.ErrNotAttempted, clip(paused.OrderingKey))
	}
	if errors.Is(err, ps.ErrOversizedMessage) {
		return sinks.Permanent(fmt.Errorf("message for Pub/Sub topic %s is larger than a publish request may be: %w", p.id, err))
	}
	if status.Code(err) == codes.InvalidArgument {
		return s.isolate(ctx, p, err)
	}
	return s.classify(p.id, err)
}

// isolate publishes p's message alone, once, after Pub/Sub refused the
// request that held it as invalid (InvalidArgument): a request holds
// several messages and fails as a whole, so only a message refused on its
// own is at fault (a topic's schema refuses it, a limit the sink does not
// know of). The key of p is paused meanwhile, so its order holds.
func (s *Sink) isolate(ctx context.Context, p *sent, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("Pub/Sub refused a publish request holding the message, and there is no time left to send it alone: %w", err)
	}
	req := &pubsubpb.PublishRequest{Topic: s.topicName(p.id), Messages: []*pubsubpb.PubsubMessage{{
		Data: p.msg.Data, Attributes: p.msg.Attributes, OrderingKey: p.msg.OrderingKey,
	}}}
	_, err = s.client.TopicAdminClient.Publish(ctx, req, gax.WithRetry(func() gax.Retryer { return nil }))
	switch {
	case err == nil:
		s.health.acked()
		return nil
	case status.Code(err) == codes.InvalidArgument:
		return sinks.Permanent(fmt.Errorf("Pub/Sub refuses the message for topic %s (a schema it does not match, or a limit): %w", p.id, err))
	}
	return s.classify(p.id, err)
}

// classify turns a failed publish to topic ID id into its outcome: what
// the row can never get past is permanent, the rest transient, each with
// a text that says what to do about it.
func (s *Sink) classify(id string, err error) error {
	switch code := status.Code(err); code {
	case codes.NotFound:
		if s.cfg.Topic != "" {
			// The one topic is missing: a setup problem, the same for
			// every row; the probe makes the sink unavailable.
			s.health.poke()
			return fmt.Errorf("Pub/Sub topic %s (PUBSUB_TOPIC) does not exist in project %s: create it; the rows wait: %w", id, s.cfg.Project, err)
		}
		return sinks.Permanent(fmt.Errorf("Pub/Sub topic %s does not exist in project %s (Pub/Sub never creates one): create it and replay the row, or route the row elsewhere: %w", id, s.cfg.Project, err))
	case codes.PermissionDenied:
		if _, logged := s.denied.LoadOrStore(id, true); !logged {
			s.log.Error("Pub/Sub refuses the relay's principal publishing to a topic: grant it roles/pubsub.publisher on the topic; the rows are retried with backoff until their attempts run out", "topic", id, "err", err)
		}
		return fmt.Errorf("not allowed to publish to Pub/Sub topic %s (grant roles/pubsub.publisher to the relay's principal); retrying: %w", id, err)
	case codes.Unauthenticated:
		s.health.poke()
		return fmt.Errorf("Pub/Sub refuses the relay's credentials (PUBSUB_CREDENTIALS, or the application default credentials); retrying: %w", err)
	case codes.ResourceExhausted:
		d := s.health.throttled(err)
		return sinks.RetryAfter(fmt.Errorf("Pub/Sub throttles publishes to topic %s (a quota, or the 1 MB/s of an ordering key); retrying after %s: %w", id, d, err), d)
	case codes.FailedPrecondition:
		return fmt.Errorf("Pub/Sub topic %s cannot take publishes now (its encryption key, or its state); retrying: %w", id, err)
	case codes.Unavailable, codes.DeadlineExceeded:
		s.health.poke()
		return fmt.Errorf("Pub/Sub did not take the message for topic %s within PUBSUB_TIMEOUT=%s: %w", id, s.cfg.Timeout, err)
	}
	return fmt.Errorf("publish to Pub/Sub topic %s: %w", id, err)
}
