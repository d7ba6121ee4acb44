package sns_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestSink_FIFOKeepsEachKeysOrder publishes keyed rows in batches larger
// than one PublishBatch to a FIFO topic: each key is one message group,
// and its rows arrive at the subscribed FIFO queue in the order they were
// in the batch.
func TestSink_FIFOKeepsEachKeysOrder(t *testing.T) {
	t.Parallel()
	srv := sqstest.Start(t)
	arn, u := srv.CreateTopic(t, "order.fifo")
	s := newSink(t, srv, arn, nil)
	const n, keys = 300, 7
	msgs := sinktest.Messages(t, n)
	for i := range msgs {
		msgs[i].Key = fmt.Sprintf("k%d", i%keys)
		msgs[i].Headers = map[string]string{"seq": fmt.Sprint(i)}
	}
	for start := 0; start < n; start += 100 {
		for i, err := range deliver(t, s, msgs[start:start+100]) {
			if err != nil {
				t.Fatalf("message %d: %v", start+i, err)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	got := srv.Received(t, u)
	for ; len(got) < n; got = srv.Received(t, u) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages arrived", len(got), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	last := map[string]int{}
	for _, m := range got {
		var seq int
		fmt.Sscan(aws.ToString(m.MessageAttributes["seq"].StringValue), &seq)
		g := m.Attributes["MessageGroupId"]
		if prev, ok := last[g]; ok && seq <= prev {
			t.Errorf("group %s: %d after %d", g, seq, prev)
		}
		last[g] = seq
	}
	if len(last) != keys {
		t.Errorf("%d groups, want %d", len(last), keys)
	}
}
