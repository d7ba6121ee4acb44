package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// How the sink watches the cluster.
const (
	// probeInterval is the pause between two probes while the cluster
	// answers; a probe is skipped when an acknowledgement came in meanwhile.
	probeInterval = 2 * time.Second
	// retryInterval is the pause between two probes while no broker
	// answers.
	retryInterval = 250 * time.Millisecond
	// probeTimeout bounds one probe (a broker-only metadata request to each
	// known broker in turn).
	probeTimeout = 5 * time.Second
)

// health is what the sink knows of the cluster: whether a broker answered
// the last probe, and why not when none did. Connection events from the
// client wake the watcher, so that a lost cluster is noticed at once.
type health struct {
	// down is nil while a broker answers, else the reason deliveries are
	// not attempted (wrapping sinks.ErrNotAttempted).
	down atomic.Pointer[error]
	// lastErr is the last probe's error, nil after a good probe.
	lastErr atomic.Pointer[error]
	// lastAck is when Kafka last acknowledged a record or a probe, in Unix
	// nanoseconds.
	lastAck atomic.Int64
	// wake asks the watcher for a probe now.
	wake chan struct{}
}

var errNotConnectedYet = fmt.Errorf("%w: not connected to Kafka yet", sinks.ErrNotAttempted)

func newHealth() *health {
	h := &health{wake: make(chan struct{}, 1)}
	h.down.Store(&errNotConnectedYet)
	return h
}

// available returns nil while a broker answers.
func (h *health) available() error {
	if err := h.down.Load(); err != nil {
		return *err
	}
	return nil
}

// acked notes a sign of life from the cluster.
func (h *health) acked() { h.lastAck.Store(time.Now().UnixNano()) }

// poke asks for a probe without waiting for it.
func (h *health) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// OnBrokerConnect implements kgo.HookBrokerConnect: a failed connection
// may mean the cluster is gone.
func (h *health) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.poke()
	}
}

// OnBrokerDisconnect implements kgo.HookBrokerDisconnect.
func (h *health) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { h.poke() }

var (
	_ kgo.HookBrokerConnect    = (*health)(nil)
	_ kgo.HookBrokerDisconnect = (*health)(nil)
)

// watch probes the cluster until ctx ends: at once, then every
// probeInterval while it answers (unless records were acknowledged
// meanwhile) and every retryInterval while it does not, and at once when a
// connection drops or fails. It logs each change.
func (s *Sink) watch(ctx context.Context) {
	defer close(s.watched)
	h := s.health
	first := true
	for {
		err := s.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		wasUp := h.available() == nil
		if err == nil {
			h.acked()
			h.lastErr.Store(nil)
			h.down.Store(nil)
			if !wasUp {
				s.log.Info("connected to Kafka")
			}
		} else {
			prev := h.lastErr.Swap(&err)
			down := fmt.Errorf("%w: no Kafka broker answers: %w", sinks.ErrNotAttempted, err)
			h.down.Store(&down)
			switch {
			case authRefused(err) && (prev == nil || !authRefused(*prev)):
				s.log.Warn("Kafka refuses the relay's credentials; deliveries wait until they are fixed", "err", err)
			case wasUp || first:
				s.log.Warn("no Kafka broker answers; deliveries wait until one does", "err", err)
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
			case <-h.wake:
				if err != nil {
					continue // already down: keep to retryInterval
				}
				skip = false
			case <-timer.C:
				// Recent acknowledgements are proof enough.
				if err == nil && time.Since(time.Unix(0, h.lastAck.Load())) < probeInterval {
					timer.Reset(probeInterval)
					continue
				}
				skip = false
			}
		}
		timer.Stop()
	}
}

// probe asks the cluster for its brokers, from any broker that answers,
// and explains the failure when none does.
func (s *Sink) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := s.cl.Ping(ctx)
	if err == nil {
		return nil
	}
	if authFailure(err) {
		return fmt.Errorf("%w: %w", errAuthFailed, err)
	}
	// Some brokers answer bad credentials by closing the connection. A
	// broker going down does that once; one that does it probe after probe
	// refuses the credentials.
	if s.cfg.SASL.Mechanism != "" && errors.Is(err, io.EOF) {
		if s.eofs++; s.eofs >= eofsForAuth {
			return fmt.Errorf("%w: the brokers close every connection while it authenticates: %w", errAuthFailed, err)
		}
	} else {
		s.eofs = 0
	}
	return err
}

// eofsForAuth is how many probes in a row must see a connection closed
// while it authenticates before the sink says its credentials are refused.
const eofsForAuth = 3

// errAuthFailed marks a probe that the cluster answered by refusing the
// sink's credentials.
var errAuthFailed = errors.New("Kafka refused the SASL credentials (check KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD)")

// authRefused reports whether a probe's err is a refusal of the
// credentials.
func authRefused(err error) bool { return errors.Is(err, errAuthFailed) }

// authFailure reports whether err is the cluster refusing the sink's
// credentials.
func authFailure(err error) bool {
	return errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState)
}
