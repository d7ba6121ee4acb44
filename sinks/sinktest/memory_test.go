package sinktest_test

import (
	"errors"
	"testing"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

func TestMemory_Conformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
			m := &sinktest.Memory{Fail: func(m *sinks.Message) error {
				if m.Topic == "refused" {
					return sinks.Permanent(errors.New("refused"))
				}
				return nil
			}}
			return m, m
		},
		Reject:   func(m *sinks.Message) { m.Topic = "refused" },
		Features: sinktest.Features{Headers: true, Outage: true},
	})
}
