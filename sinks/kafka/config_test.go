package kafka_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

func TestNew_RefusesBadConfig(t *testing.T) {
	brokers := []string{"127.0.0.1:9092"}
	tests := []struct {
		name string
		cfg  kafkasink.Config
	}{
		{"no brokers", kafkasink.Config{}},
		{"bad prefix", kafkasink.Config{Brokers: brokers, TopicPrefix: "events/"}},
		{"produce timeout under a second", kafkasink.Config{Brokers: brokers, ProduceTimeout: 500 * time.Millisecond}},
		{"max message bytes too small", kafkasink.Config{Brokers: brokers, MaxMessageBytes: 100}},
		{"max message bytes too large", kafkasink.Config{Brokers: brokers, MaxMessageBytes: kafkasink.MaxMessageBytesMax + 1}},
		{"TLS files without TLS", kafkasink.Config{Brokers: brokers, TLS: kafkasink.TLS{CAFile: "/etc/hosts"}}},
	}
	for _, tt := range tests {
		if s, err := kafkasink.New(tt.cfg); err == nil {
			s.Close()
			t.Errorf("%s: New accepted %+v", tt.name, tt.cfg)
		}
	}
}

// TestNew_DoesNotWaitForTheCluster opens a sink on a port nobody listens
// on: New returns at once, the sink says it is not connected, Deliver
// attempts nothing, and Close does not wait.
func TestNew_DoesNotWaitForTheCluster(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	start := time.Now()
	s, err := kafkasink.New(kafkasink.Config{Brokers: []string{addr}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("New took %s", took)
	}
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) {
		t.Errorf("Available = %v, want not attempted", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, err := range s.Deliver(ctx, sinktest.Messages(t, 3)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("message %d: %v, want not attempted", i, err)
		}
	}
	start = time.Now()
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %s with no cluster", took)
	}
}
