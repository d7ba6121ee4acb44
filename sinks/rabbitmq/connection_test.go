package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/rabbitmq"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

func TestSink_ReconnectsWhenTheBrokerClosesTheConnection(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, sinktest.Topic, nil)
	s, logs := newSinkLogged(t, v, nil)
	waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })
	var sent []sinks.Message
	for round := range 3 {
		msgs := sinktest.Messages(t, 10)
		mustDeliver(t, s, msgs)
		sent = append(sent, msgs...)
		v.CloseConnections(t, "outbox-relay test: closed by the broker")
		waitfor.Condition(t, 15*time.Second, "the sink to notice", func() bool { return len(logs.Lines("connection to RabbitMQ lost")) > round })
		waitfor.Condition(t, 15*time.Second, "the sink to reconnect", func() bool { return s.Available() == nil })
	}
	if !strings.Contains(logs.String(), "CONNECTION_FORCED - outbox-relay test: closed by the broker") {
		t.Error("the log does not give the broker's reason")
	}
	mustDeliver(t, s, sinktest.Messages(t, 1))
	got := v.WaitTake(t, queue, len(sent)+1, 15*time.Second)
	for _, m := range sent {
		if !slices.ContainsFunc(got, func(r amqp.Delivery) bool { return r.MessageId == m.IdempotencyKey }) {
			t.Errorf("message %s was confirmed but is not in the queue", m.IdempotencyKey)
		}
	}
}

func TestSink_UnreachableBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	s, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://guest:hunter2@127.0.0.1:1/", Logger: slogTo(t.Output())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitfor.Condition(t, 15*time.Second, "a failed connection attempt", func() bool {
		return strings.Contains(s.Available().Error(), "connection refused")
	})
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("Available: %v, want an error wrapping sinks.ErrNotAttempted", err)
	}
	for i, err := range deliver(t, s, sinktest.Messages(t, 3)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("message %d: %v, want not attempted", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	problems, err := s.CheckStartup(ctx)
	if err == nil || len(problems) != 0 {
		t.Errorf("CheckStartup with the broker down: %v, %v; want an error (the check could not be made) and no problem", problems, err)
	}
	start := time.Now()
	if err := s.Close(); err != nil || time.Since(start) > 5*time.Second {
		t.Errorf("Close: %v after %s", err, time.Since(start))
	}
}

// TestSink_BlockedConnection raises a memory alarm on the broker: every
// publishing connection is blocked (connection.blocked). Not parallel: the
// alarm blocks every test that publishes.
func TestSink_BlockedConnection(t *testing.T) {
	v := rabbitmqtest.New(t)
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, sinktest.Topic, nil)
	s := newSink(t, v, func(c *rabbitmq.Config) { c.ConfirmTimeout = time.Minute })
	mustDeliver(t, s, sinktest.Messages(t, 1))

	lift := rabbitmqtest.MemoryAlarm(t)
	// The broker blocks a connection when it next publishes: this batch
	// waits for confirms that do not come.
	inFlight := sinktest.Messages(t, 3)
	outcomes := make(chan []error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		outcomes <- s.Deliver(ctx, inFlight)
	}()
	waitfor.Condition(t, 15*time.Second, "Available to report the blocked connection", func() bool { return s.Available() != nil })
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "blocked") {
		t.Errorf("Available while blocked: %v, want a not-attempted error saying the broker blocked the connection", err)
	}
	for i, err := range deliver(t, s, sinktest.Messages(t, 2)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("message %d, sent while blocked: %v, want not attempted", i, err)
		}
	}

	// The broker drops the blocked connection: the messages in flight fail
	// at once, as transient, instead of waiting for their timeout.
	start := time.Now()
	v.CloseConnections(t, "outbox-relay test: closed while blocked")
	select {
	case errs := <-outcomes:
		for i, err := range errs {
			if err == nil || sinks.IsPermanent(err) {
				t.Errorf("message %d in flight on a dropped connection: %v, want a transient error", i, err)
			}
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("the in-flight batch took %s to fail after the connection dropped", d)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the in-flight batch did not fail when the connection dropped")
	}

	lift()
	waitfor.Condition(t, 30*time.Second, "the sink to reconnect, unblocked", func() bool { return s.Available() == nil })
	after := sinktest.Messages(t, 3)
	mustDeliver(t, s, after)
	// What was published while blocked may arrive too: a retry then makes a
	// duplicate, never a loss.
	got := v.WaitTake(t, queue, 1+len(after), 15*time.Second)
	for _, m := range after {
		if !slices.ContainsFunc(got, func(d amqp.Delivery) bool { return d.MessageId == m.IdempotencyKey }) {
			t.Errorf("message %s was confirmed but is not in the queue", m.IdempotencyKey)
		}
	}
}

func TestCheckStartup(t *testing.T) {
	t.Parallel()
	v := rabbitmqtest.New(t)
	check := func(t *testing.T, cfg rabbitmq.Config) ([]sinks.Problem, string) {
		t.Helper()
		var logs *testlog.Buffer
		cfg.Logger, logs = testlog.New(t, slog.LevelDebug)
		s, err := rabbitmq.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		problems, err := s.CheckStartup(ctx)
		if err != nil {
			t.Fatalf("CheckStartup: %v", err)
		}
		return problems, logs.String()
	}
	codes := func(problems []sinks.Problem) []string {
		var out []string
		for _, p := range problems {
			out = append(out, p.Code)
		}
		return out
	}

	t.Run("ExchangeExists", func(t *testing.T) {
		if p, _ := check(t, rabbitmq.Config{URL: v.URL}); len(p) != 0 {
			t.Errorf("problems %v, want none: amq.topic exists", codes(p))
		}
	})
	t.Run("NoExchange", func(t *testing.T) {
		p, _ := check(t, rabbitmq.Config{URL: v.URL, Exchange: "not.declared"})
		if got := codes(p); !slices.Equal(got, []string{rabbitmq.ProblemNoExchange}) {
			t.Errorf("problems %v, want [%s]", got, rabbitmq.ProblemNoExchange)
		}
	})
	t.Run("WrongPassword", func(t *testing.T) {
		url := strings.Replace(v.URL, "guest:guest@", "guest:s3cr3t-pw@", 1)
		p, log := check(t, rabbitmq.Config{URL: url})
		if got := codes(p); !slices.Equal(got, []string{rabbitmq.ProblemAuthFailed}) {
			t.Errorf("problems %v, want [%s]", got, rabbitmq.ProblemAuthFailed)
		}
		for _, problem := range p {
			log += problem.Message
			for _, a := range problem.Attrs {
				log += " " + fmt.Sprint(a)
			}
		}
		if strings.Contains(log, "s3cr3t-pw") {
			t.Errorf("the password shows in the log or the problem:\n%s", log)
		}
		if !strings.Contains(log, "amqp://guest@127.0.0.1:5672/") {
			t.Errorf("the log does not show the URL without its password:\n%s", log)
		}
	})
	t.Run("NoVirtualHost", func(t *testing.T) {
		url := strings.Replace(v.URL, v.Name, "outbox-test-no-such-vhost", 1)
		p, _ := check(t, rabbitmq.Config{URL: url})
		if got := codes(p); !slices.Equal(got, []string{rabbitmq.ProblemVhostRefused}) {
			t.Errorf("problems %v, want [%s]", got, rabbitmq.ProblemVhostRefused)
		}
	})
}
