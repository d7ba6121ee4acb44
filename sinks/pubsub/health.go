package pubsub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// How the sink watches Pub/Sub.
const (
	// probeInterval is the pause between two probes while Pub/Sub
	// answers; a probe is skipped when a publish was acknowledged
	// meanwhile.
	probeInterval = 3 * time.Second
	// retryInterval is the pause between two probes while it does not.
	retryInterval = 250 * time.Millisecond
	// probeTimeout bounds one probe (a GetTopic request).
	probeTimeout = 5 * time.Second
	// throttleMin and throttleMax bound the pause after Pub/Sub refused a
	// publish with ResourceExhausted; it doubles while refusals go on.
	throttleMin = 500 * time.Millisecond
	throttleMax = 15 * time.Second
)

// probeTopicID is the topic the probe asks for when rows name their
// topics: any answer from Pub/Sub, "not found" included, shows it
// reachable with the credentials taken.
const probeTopicID = "outbox-relay-probe"

// health is what the sink knows of Pub/Sub: whether the last probe got
// an answer, and why not; and whether publishes are throttled.
type health struct {
	// down is nil while Pub/Sub answers, else the reason deliveries are
	// not attempted (wrapping sinks.ErrNotAttempted).
	down atomic.Pointer[error]
	// lastErr is the last probe's error, nil after a good probe.
	lastErr atomic.Pointer[error]
	// lastAck is when Pub/Sub last acknowledged a publish or a probe, in
	// Unix nanoseconds.
	lastAck atomic.Int64
	// wake asks the watcher for a probe now.
	wake chan struct{}

	mu            sync.Mutex
	throttleUntil time.Time
	throttleFor   time.Duration
	throttleErr   error
}

var errNotConnectedYet = fmt.Errorf("%w: not connected to Pub/Sub yet", sinks.ErrNotAttempted)

func newHealth() *health {
	h := &health{wake: make(chan struct{}, 1)}
	h.down.Store(&errNotConnectedYet)
	return h
}

// available returns nil while Pub/Sub answers and does not throttle.
func (h *health) available() error {
	if err := h.down.Load(); err != nil {
		return *err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if until := h.throttleUntil; !until.IsZero() && time.Now().Before(until) {
		return fmt.Errorf("%w: Pub/Sub throttles publishes (ResourceExhausted); paused until %s: %w",
			sinks.ErrNotAttempted, until.UTC().Format(time.RFC3339), h.throttleErr)
	}
	return nil
}

// acked notes a sign of life from Pub/Sub, which ends a throttle.
func (h *health) acked() {
	h.lastAck.Store(time.Now().UnixNano())
	h.mu.Lock()
	h.throttleFor = 0
	h.mu.Unlock()
}

// throttled notes a publish refused with ResourceExhausted and returns
// how long the sink pauses.
func (h *health) throttled(err error) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Now().Before(h.throttleUntil) {
		return time.Until(h.throttleUntil) // one pause for a batch
	}
	h.throttleFor = min(max(2*h.throttleFor, throttleMin), throttleMax)
	h.throttleUntil = time.Now().Add(h.throttleFor)
	h.throttleErr = err
	return h.throttleFor
}

// poke asks for a probe without waiting for it.
func (h *health) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// watch probes Pub/Sub until ctx ends: at once, then every probeInterval
// while it answers (unless publishes were acknowledged meanwhile) and
// every retryInterval while it does not, and at once when a publish
// failed as if it were gone. It logs each change, and stops idle
// publishers.
func (s *Sink) watch(ctx context.Context) {
	defer close(s.watched)
	h := s.health
	first := true
	for {
		err := s.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		wasUp := h.down.Load() == nil
		if err == nil {
			h.lastAck.Store(time.Now().UnixNano())
			h.lastErr.Store(nil)
			h.down.Store(nil)
			if !wasUp || first {
				s.log.Info("connected to Pub/Sub")
			}
		} else {
			prev := h.lastErr.Swap(&err)
			down := fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err)
			h.down.Store(&down)
			if wasUp || first || prev == nil || !sameKind(*prev, err) {
				s.log.Warn("Pub/Sub cannot take deliveries; they wait until it can", "err", err)
			}
		}
		first = false
		s.evictIdle()

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
			case <-h.wake:
				if err != nil {
					continue // already down: keep to retryInterval
				}
				skip = false
			case <-timer.C:
				if err == nil && time.Since(time.Unix(0, h.lastAck.Load())) < probeInterval {
					s.evictIdle()
					timer.Reset(probeInterval)
					continue
				}
				skip = false
			}
		}
		timer.Stop()
	}
}

// Why the probe finds Pub/Sub unable to take deliveries.
var (
	errAuthFailed   = errors.New("Pub/Sub refuses the relay's credentials (check PUBSUB_CREDENTIALS, or the application default credentials: the workload identity's service account)")
	errTopicMissing = errors.New("Pub/Sub topic PUBSUB_TOPIC does not exist: create it; rows wait until it does")
	errUnreachable  = errors.New("Pub/Sub does not answer")
)

// sameKind reports whether two probe errors have the same cause.
func sameKind(a, b error) bool {
	for _, kind := range []error{errAuthFailed, errTopicMissing, errUnreachable} {
		if errors.Is(a, kind) && errors.Is(b, kind) {
			return true
		}
	}
	return false
}

// probe asks Pub/Sub for a topic, once, without the client's retries:
// PUBSUB_TOPIC when it is set (it must exist), else a topic nobody needs
// to have, whose "not found" shows Pub/Sub reachable. A refused
// permission also does: a principal may publish without being allowed to
// read the topic.
func (s *Sink) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	id := cmp.Or(s.cfg.Topic, s.cfg.TopicPrefix+probeTopicID)
	_, err := s.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: s.topicName(id)},
		gax.WithRetry(func() gax.Retryer { return nil }))
	switch status.Code(err) {
	case codes.OK, codes.PermissionDenied:
		return nil
	case codes.NotFound:
		if s.cfg.Topic != "" {
			return fmt.Errorf("%w (topic %s in project %s)", errTopicMissing, s.cfg.Topic, s.cfg.Project)
		}
		return nil
	case codes.Unauthenticated:
		return fmt.Errorf("%w: %w", errAuthFailed, err)
	}
	return fmt.Errorf("%w: %w", errUnreachable, err)
}
