package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

func TestSubscribe_PrintsSubjectHeadersAndPayload(t *testing.T) {
	srv := natstest.Start(t)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- subscribe(srv.URL(), "events.>", 1, &out) }()
	nc := srv.Connect(t)
	// Publish until the subscriber is listening (it subscribes first).
	waitfor.Condition(t, 10*time.Second, "the subscriber to print a message", func() bool {
		m := &nats.Msg{Subject: "events.orders.created", Data: []byte(`{"id": 42}`), Header: nats.Header{"Nats-Msg-Id": {"k-1"}}}
		_ = nc.PublishMsg(m)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	for _, want := range []string{"events.orders.created", "Nats-Msg-Id: k-1", `{"id": 42}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
}
