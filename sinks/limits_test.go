package sinks_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

func TestCheckHeaderBudget(t *testing.T) {
	t.Parallel()
	at := func(n int) *sinks.Message {
		// "x-pad" takes 5 bytes of the budget.
		return &sinks.Message{Message: outbox.Message{Headers: map[string]string{"x-pad": strings.Repeat("h", n-5)}}}
	}
	if err := sinks.CheckHeaderBudget(at(sinks.HeaderBytesMax)); err != nil {
		t.Errorf("headers of exactly the budget: %v", err)
	}
	if err := sinks.CheckHeaderBudget(&sinks.Message{}); err != nil {
		t.Errorf("no headers: %v", err)
	}
	err := sinks.CheckHeaderBudget(at(sinks.HeaderBytesMax + 1))
	var limit *sinks.LimitError
	if !sinks.IsPermanent(err) || !errors.As(err, &limit) {
		t.Fatalf("headers over the budget: %v, want a permanent *LimitError", err)
	}
	if want := "headers of 16385 bytes exceeds the relay's header budget of 16384 bytes"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestCheckMessage_IdempotencyKeyWithOuterSpaceIsPermanent(t *testing.T) {
	t.Parallel()
	// NATS and HTTP trim a header value: "k " would arrive as "k".
	for _, key := range []string{"k ", " k", " "} {
		m := &sinks.Message{Message: outbox.Message{IdempotencyKey: key}}
		if err := sinks.CheckMessage(m); !sinks.IsPermanent(err) {
			t.Errorf("key %q: %v, want a permanent error", key, err)
		}
	}
	for _, key := range []string{"k k", "k\u00a0", "\u3000k"} {
		m := &sinks.Message{Message: outbox.Message{IdempotencyKey: key}}
		if err := sinks.CheckMessage(m); err != nil {
			t.Errorf("key %q: %v, want nil", key, err)
		}
	}
}
