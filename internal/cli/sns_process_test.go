package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	snssink "github.com/outbox-relay/outbox-relay/sinks/sns"
)

// snsProcessEnv is what the binary needs to reach the emulator srv's SNS:
// its endpoint and credentials through AWS's own variables (the credential
// chain), no instance metadata; the region is the topic ARN's.
func snsProcessEnv(srv *sqstest.Server) []string {
	return []string{
		"SNS_ENDPOINT=" + srv.Endpoint(),
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true",
	}
}

// TestProcess_SNSOrderedAcrossRelaysAndSIGKILL runs two relays in ordered
// and in partitioned mode with a topic per row (SNS_TOPIC_ARN ending in a
// colon, a prefix): rows of a FIFO topic arrive at the FIFO queue
// subscribed to it once each (a copy published again after the SIGKILL of
// one relay has the same MessageDeduplicationId, which the emulator's FIFO
// queue drops; SNS does within five minutes), byte for byte, each key's
// rows in insert order; a row over SNS's 256 KiB and a row whose SNS topic
// does not exist are dead-lettered alone.
func TestProcess_SNSOrderedAcrossRelaysAndSIGKILL(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"ordered", "partitioned"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testSNSOrderAcrossRelays(t, mode)
		})
	}
}

func testSNSOrderAcrossRelays(t *testing.T, mode string) {
	db := dbtest.New(t)
	srv := sqstest.Start(t)
	_, u := srv.CreateTopic(t, "events-orders.fifo")
	env := append(snsProcessEnv(srv),
		"DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "RELAY_MODE="+mode,
		"SNS_TOPIC_ARN="+sqstest.TopicARNPrefix, "SNS_TOPIC_PREFIX=events-",
		// A short lease, which SNS_TIMEOUT must fit in: the killed
		// relay's rows are taken over soon.
		"RELAY_LEASE=3s", "SNS_TIMEOUT=1s", "RELAY_BACKOFF_MIN=100ms", "RELAY_BACKOFF_MAX=200ms")
	a := startProcess(t, env...)
	startProcess(t, env...) // the second relay, which takes over

	const n, keys = 300, 7
	db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, headers)
SELECT 'orders.fifo',
       CASE WHEN i % 50 = 0 THEN '\x00ff'::bytea ELSE convert_to(json_build_object('seq', i)::text, 'UTF8') END,
       'k' || (i % $2),
       jsonb_build_object('traceparent', '00-' || lpad(to_hex(i), 32, '0') || '-00f067aa0ba902b7-01', 'seq', i::text)
  FROM generate_series(1, $1) AS i`, n, keys)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES
	  ('orders.fifo', convert_to(repeat('x', 300000), 'UTF8'), 'too-large-1'),
	  ('nowhere', 'lost?', 'no-topic-1')`)
	waitfor.Condition(t, 30*time.Second, "some rows delivered", func() bool { return db.Count(t, "archive") > 20 })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitDrained(t, db, relaytest.Budget(n))
	waitfor.Condition(t, 30*time.Second, "two dead letters", func() bool { return db.Count(t, "dead_letters") == 2 })

	payloads := map[string][]byte{}
	rows, err := db.Pool.Query(context.Background(), "SELECT idempotency_key, payload FROM "+db.Table("archive")+" WHERE NOT duplicate")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var p []byte
		if err := rows.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		payloads[id] = p
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var got []struct {
		id, group string
		seq       int
	}
	// A loaded machine slows the emulator's receives: wait while they
	// make progress.
	deadline, prev := time.Now().Add(20*time.Second), 0
	for c := len(srv.Received(t, u)); c < n; c = len(srv.Received(t, u)) {
		if c > prev {
			deadline, prev = time.Now().Add(20*time.Second), c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue has had %d of %d messages, and no more for 20s", c, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	seen := map[string]int{}
	for _, m := range srv.Received(t, u) {
		id := aws.ToString(m.MessageAttributes[snssink.IdempotencyKeyAttribute].StringValue)
		seen[id]++
		body := []byte(aws.ToString(m.Body))
		if aws.ToString(m.MessageAttributes[snssink.BodyEncodingAttribute].StringValue) == snssink.EncodingBase64 {
			if body, err = base64.StdEncoding.DecodeString(string(body)); err != nil {
				t.Fatal(err)
			}
		}
		if want, ok := payloads[id]; !ok || !bytes.Equal(body, want) {
			t.Errorf("message %s: body %q, want the row's %q", id, body, want)
		}
		var seq int
		fmt.Sscan(aws.ToString(m.MessageAttributes["seq"].StringValue), &seq)
		got = append(got, struct {
			id, group string
			seq       int
		}{id, m.Attributes["MessageGroupId"], seq})
		if tp := aws.ToString(m.MessageAttributes["traceparent"].StringValue); !strings.HasPrefix(tp, "00-") {
			t.Errorf("message %s lost its traceparent: %q", id, tp)
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("message %s arrived %d times", id, c)
		}
	}
	if len(seen) != n {
		t.Errorf("the queue holds %d of %d messages", len(seen), n)
	}
	last := map[string]int{}
	for _, g := range got {
		if g.seq <= last[g.group] {
			t.Errorf("group %s: seq %d arrived after %d", g.group, g.seq, last[g.group])
		}
		last[g.group] = g.seq
	}
	if len(last) != keys {
		t.Errorf("%d message groups, want one per key (%d)", len(last), keys)
	}
	for id, want := range map[string]string{"too-large-1": "SNS's message size", "no-topic-1": "does not exist"} {
		var reason, deadErr string
		if err := db.Pool.QueryRow(context.Background(), "SELECT reason, error FROM "+db.Table("dead_letters")+" WHERE idempotency_key = $1", id).Scan(&reason, &deadErr); err != nil {
			t.Fatalf("%s is not dead: %v", id, err)
		}
		if reason != "permanent" || !strings.Contains(deadErr, want) {
			t.Errorf("%s is dead with reason %q, error %q; want permanent, %s", id, reason, deadErr, want)
		}
	}
}

// TestProcess_SNSOutageRowsWait stops the emulator under a running relay
// publishing to one topic: rows wait in the table, /readyz says SNS does
// not answer, and once it is back every row arrives, byte for byte.
// (fauxqs cannot throttle: throttling's pause is tested in sinks/sns.)
func TestProcess_SNSOutageRowsWait(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := sqstest.Start(t)
	arn, u := srv.CreateTopic(t, "orders")
	p := startProcess(t, append(snsProcessEnv(srv), "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "SNS_TOPIC_ARN="+arn,
		"RELAY_BACKOFF_MIN=100ms", "RELAY_BACKOFF_MAX=200ms")...)
	p.metrics() // the endpoint is up
	srv.Stop()
	waitfor.Condition(t, 20*time.Second, "/readyz to say why", func() bool {
		code, body := get(t, "http://"+p.addr+"/readyz")
		return code != 200 && strings.Contains(body, "SNS does not answer")
	})
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'orders.created', convert_to(i::text, 'UTF8') FROM generate_series(1, 50) AS i`)
	time.Sleep(time.Second)
	if c := db.Count(t, "messages_all"); c != 50 {
		t.Fatalf("%d rows in the hot table during the outage, want all 50", c)
	}
	var attempts int
	if err := db.Pool.QueryRow(context.Background(), "SELECT coalesce(max(attempts), 0) FROM "+db.Table("messages")).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts > 1 {
		t.Errorf("rows spent %d attempts while SNS was down", attempts)
	}
	srv.Start(t)
	relaytest.WaitDrained(t, db, 30*time.Second)
	waitfor.Condition(t, 20*time.Second, "every message in the queue", func() bool { return len(srv.Received(t, u)) >= 50 })
	ids := map[string]bool{}
	for _, m := range srv.Received(t, u) {
		ids[aws.ToString(m.MessageAttributes[snssink.IdempotencyKeyAttribute].StringValue)] = true
		if b := aws.ToString(m.Body); len(b) == 0 || len(b) > 2 || strings.Trim(b, "0123456789") != "" {
			t.Errorf("body %q, want the row's number", b)
		}
	}
	if len(ids) != 50 {
		t.Errorf("%d distinct messages arrived, want 50", len(ids))
	}
}
