package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Start-up problems CheckStartup reports (outbox_relay_sink_problem).
const (
	ProblemAuthFailed   = "auth_failed"
	ProblemVhostRefused = "vhost_refused"
	ProblemTLSFailed    = "tls_failed"
	ProblemNoExchange   = "no_exchange"
)

// CheckStartup waits for a connection and checks, with a passive declare on
// a channel of its own, that Config.Exchange exists. While it waits, a
// connection attempt refused for good reasons (credentials, virtual host,
// TLS) is reported at once, as a problem: the sink goes on retrying.
func (s *Sink) CheckStartup(ctx context.Context) ([]sinks.Problem, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ss := s.live(); ss != nil {
			return s.checkExchange(ss.conn)
		}
		if p := s.lastDialErr.Load(); p != nil {
			if problem, ok := connectProblem(*p); ok {
				return []sinks.Problem{problem}, nil
			}
		}
		select {
		case <-ctx.Done():
			err := fmt.Errorf("check RabbitMQ exchange %s: %w", s.cfg.Exchange, ctx.Err())
			if down := s.Available(); down != nil {
				err = fmt.Errorf("%w (%v)", err, down)
			}
			return nil, err
		case <-tick.C:
		}
	}
}

// checkExchange declares the exchange passively on a channel of its own
// (the broker closes a channel whose passive declare fails).
func (s *Sink) checkExchange(c *connection) ([]sinks.Problem, error) {
	ch, err := c.amqp.Channel()
	if err != nil {
		return nil, fmt.Errorf("check RabbitMQ exchange %s: open channel: %w", s.cfg.Exchange, err)
	}
	defer func() { _ = ch.Close() }()
	err = ch.ExchangeDeclarePassive(s.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return []sinks.Problem{{
			Code:    ProblemNoExchange,
			Message: "the RabbitMQ exchange does not exist in the virtual host: every publish fails and is retried until it is declared (and a queue bound to it)",
			Attrs:   []any{"exchange", s.cfg.Exchange, "reason", ae.Reason},
		}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check RabbitMQ exchange %s: %w", s.cfg.Exchange, s.scrub(err))
	}
	s.log.Info("RabbitMQ exchange exists; messages for routing keys no queue is bound to are returned and retried", "exchange", s.cfg.Exchange)
	return nil, nil
}

// connectProblem says whether a failed connection attempt is a setup
// problem that waiting will not fix, and which.
func connectProblem(err error) (sinks.Problem, bool) {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused:
			return sinks.Problem{
				Code:    ProblemAuthFailed,
				Message: "RabbitMQ refused the user name and password of RABBITMQ_URL: nothing is delivered until they are fixed (the sink keeps retrying)",
				Attrs:   []any{"reason", ae.Reason},
			}, true
		case amqp.NotAllowed:
			return sinks.Problem{
				Code:    ProblemVhostRefused,
				Message: "RabbitMQ refused the virtual host of RABBITMQ_URL (it does not exist, or the user has no permissions on it): nothing is delivered until it is fixed (the sink keeps retrying)",
				Attrs:   []any{"reason", ae.Reason},
			}, true
		}
	}
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	// An alert from the broker (a refused client certificate) reaches the
	// client as an unexported type: "remote error: tls: …".
	if errors.As(err, &verify) || errors.As(err, &header) || strings.Contains(err.Error(), "remote error: tls:") {
		return sinks.Problem{
			Code:    ProblemTLSFailed,
			Message: "the TLS handshake with RabbitMQ failed (check RABBITMQ_TLS_CA_FILE, the client certificate and the port): nothing is delivered until it succeeds (the sink keeps retrying)",
			Attrs:   []any{"err", err},
		}, true
	}
	return sinks.Problem{}, false
}
