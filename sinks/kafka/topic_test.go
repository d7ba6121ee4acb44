package kafka_test

import (
	"strings"
	"testing"

	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
)

func TestValidateTopic(t *testing.T) {
	tests := []struct {
		topic string
		ok    bool
	}{
		{"orders", true},
		{"events.orders.created", true},
		{"events.orders-v2.created_at", true},
		{"Orders.2026", true},
		{"connect.orders", true},
		{"orders-status", true},
		{"connector-offsets-v2", true},
		{"internal.orders", true},
		{strings.Repeat("a", 249), true},
		{"...", true},
		{"", false},
		{".", false},
		{"..", false},
		{strings.Repeat("a", 250), false},
		{"orders created", false},
		{"orders/created", false},
		{"orders:created", false},
		{"orders*", false},
		{"événements", false},
		{"orders\n", false},
		{"__consumer_offsets", false},
		{"__transaction_state", false},
		{"__anything", false},
		// The ecosystem's internal topics (issue 22).
		{"_schemas", false},
		{"_confluent-metrics", false},
		{"_confluent-ksql-default__command_topic", false},
		{"connect-configs", false},
		{"connect-offsets", false},
		{"connect-status", false},
		{"connect-cluster-offsets", false},
		{"mm2-offset-syncs.east.internal", false},
		{"east.checkpoints.internal", false},
	}
	for _, tt := range tests {
		err := kafkasink.ValidateTopic(tt.topic)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateTopic(%q) = %v, want ok=%v", tt.topic, err, tt.ok)
		}
	}
}

func TestValidateTopicPrefix(t *testing.T) {
	tests := []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"events.", true},
		{"prod-orders_", true},
		{strings.Repeat("a", 248), true},
		{strings.Repeat("a", 249), false},
		{"__events.", false},
		{"events/", false},
		{"events ", false},
	}
	for _, tt := range tests {
		err := kafkasink.ValidateTopicPrefix(tt.prefix)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateTopicPrefix(%q) = %v, want ok=%v", tt.prefix, err, tt.ok)
		}
	}
}
