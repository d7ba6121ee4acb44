package awsmsg

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// Build names the service whose rule a row breaks, so that each sink's
// dead letters say which broker refused what.
func TestBuildNamesTheServiceInItsErrors(t *testing.T) {
	for _, service := range []string{"SQS", "SNS"} {
		m := &sinks.Message{Message: outbox.Message{Topic: "t", IdempotencyKey: "k", Payload: []byte("x"), Headers: map[string]string{"bad": "\xff"}}}
		if _, err := Build(m, service); err == nil || !strings.Contains(err.Error(), service+" attributes are text") {
			t.Errorf("%s: a header of invalid UTF-8: %v", service, err)
		}
	}
}

// The size is what SQS and SNS count: the body, and each attribute's
// name, data type and value.
func TestBuildCountsTheSizeAsTheServicesDo(t *testing.T) {
	m, err := Build(&sinks.Message{Message: outbox.Message{Topic: "t", IdempotencyKey: "k", Payload: []byte("body")}}, "SQS")
	if err != nil {
		t.Fatal(err)
	}
	want := len("body") + len(IdempotencyKeyAttribute) + len(StringType) + len("k") + len(TopicAttribute) + len(StringType) + len("t")
	if m.Size != want {
		t.Errorf("size %d, want %d", m.Size, want)
	}
}
