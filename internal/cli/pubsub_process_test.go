package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/pubsubtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	pubsubsink "github.com/outbox-relay/outbox-relay/sinks/pubsub"
)

// pubsubEnv is the binary's environment for the pubsub sink at srv, rows
// of db.
func pubsubRelayEnv(db *dbtest.Schema, srv *pubsubtest.Server, extra ...string) []string {
	return append([]string{
		"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name,
		"PUBSUB_PROJECT=" + pubsubtest.Project, "PUBSUB_EMULATOR_HOST=" + srv.Addr(),
		"PUBSUB_TOPIC_PREFIX=events.",
	}, extra...)
}

// TestProcess_PubSubDeliversPlainSQLRowsOnce runs the binary with
// PUBSUB_EMULATOR_HOST at an in-process pstest: rows written with plain
// SQL arrive once each, byte for byte, with their keys as ordering keys,
// their headers as attributes and their idempotency keys, and leave the
// hot table.
func TestProcess_PubSubDeliversPlainSQLRowsOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, "events.orders.created")
	p := startProcess(t, pubsubRelayEnv(db, srv)...)
	p.waitLog(`"connected to Pub/Sub"`)

	const n = 500
	db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, headers)
SELECT 'orders.created',
       CASE WHEN i = 1 THEN ''::bytea
            ELSE '\x00ff'::bytea || convert_to(json_build_object('seq', i, 'note', 'naïve café')::text, 'UTF8') END,
       CASE WHEN i % 3 = 0 THEN 'order-' || (i % 17) END,
       CASE WHEN i % 2 = 0 THEN jsonb_build_object('content-type', 'application/json', 'traceparent', '00-' || lpad(to_hex(i), 32, '0') || '-00f067aa0ba902b7-01', 'outbox_idempotency_key', 'forged') END
  FROM generate_series(1, $1) AS i`, n)
	relaytest.WaitDrained(t, db, relaytest.Budget(n))

	type row struct {
		payload []byte
		key     *string
		headers map[string]string
	}
	rows, err := db.Pool.Query(context.Background(), "SELECT idempotency_key, payload, key, headers FROM "+db.Table("archive")+" WHERE NOT duplicate")
	if err != nil {
		t.Fatal(err)
	}
	archived := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.payload, &r.key, &r.headers); err != nil {
			t.Fatal(err)
		}
		archived[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(archived) != n {
		t.Fatalf("archive holds %d delivered rows, want %d", len(archived), n)
	}
	msgs := srv.Messages("events.orders.created")
	if len(msgs) != n {
		t.Fatalf("Pub/Sub holds %d messages for %d rows, want each once", len(msgs), n)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		id := m.Attributes[pubsubsink.IdempotencyKeyAttribute]
		r, ok := archived[id]
		switch {
		case !ok:
			t.Fatalf("message with idempotency key %q matches no delivered row", id)
		case seen[id]:
			t.Fatalf("row %s arrived twice", id)
		case !bytes.Equal(m.Data, r.payload):
			t.Fatalf("row %s: data %q, payload %q", id, m.Data, r.payload)
		case r.key == nil && m.OrderingKey != "", r.key != nil && m.OrderingKey != *r.key:
			t.Fatalf("row %s: ordering key %q, key %v", id, m.OrderingKey, r.key)
		case m.Attributes[pubsubsink.TopicAttribute] != "orders.created":
			t.Fatalf("row %s: outbox_topic %q", id, m.Attributes[pubsubsink.TopicAttribute])
		}
		seen[id] = true
		for k, v := range r.headers {
			if k != pubsubsink.IdempotencyKeyAttribute && m.Attributes[k] != v {
				t.Fatalf("row %s: attribute %s = %q, header %q", id, k, m.Attributes[k], v)
			}
		}
	}
}

// TestProcess_PubSubKeyOrderSurvivesTwoRelaysFailuresAndASIGKILL runs two
// relays in each mode that keeps a key's order, fails some publishes (a
// code the client does not retry, so that keys are paused and resumed),
// SIGKILLs one relay mid-way and starts another: every key's events are
// stored in insert order.
func TestProcess_PubSubKeyOrderSurvivesTwoRelaysFailuresAndASIGKILL(t *testing.T) {
	t.Parallel()
	inKeyOrderModes(t, func(t *testing.T, mode string) {
		db := dbtest.New(t)
		srv := pubsubtest.Start(t)
		srv.CreateTopic(t, "events.ordered")
		var n atomic.Int64
		srv.FailPublish(func(req *pubsubpb.PublishRequest) error {
			if req.Messages[0].GetOrderingKey() != "" && n.Add(1)%23 == 0 {
				return status.Error(codes.FailedPrecondition, "injected")
			}
			return nil
		})
		const keys, perKey = 100, 30
		insertOrdered(t, db, keys, perKey)
		env := pubsubRelayEnv(db, srv, mode, "RELAY_LEASE=5s", "PUBSUB_TIMEOUT=2s", "RELAY_BACKOFF_MIN=100ms", "RELAY_BACKOFF_MAX=1s", "RELAY_MAX_ATTEMPTS=100")
		for i := range env {
			if env[i] == "PUBSUB_TOPIC_PREFIX=events." {
				env[i] = "PUBSUB_TOPIC_PREFIX=" // the rows' topic is events.ordered
			}
		}
		victim := startProcess(t, env...)
		startProcess(t, env...)
		waitfor.Condition(t, relaytest.Budget(keys*perKey/5), "a fifth of the events to be delivered", func() bool {
			return db.Count(t, "archive") > keys*perKey/5
		})
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		victim.wait(10 * time.Second)
		if db.Count(t, "messages_all") == 0 {
			t.Fatal("everything was delivered before the kill; the test proves nothing")
		}
		startProcess(t, env...)
		relaytest.WaitDrained(t, db, relaytest.Budget(keys*perKey))
		if n := db.Count(t, "dead_letters"); n != 0 {
			t.Fatalf("%d rows dead-lettered", n)
		}
		if n.Load() < 23 {
			t.Fatal("no publish failed; the test proves nothing")
		}
		var accepted []orderedEvent
		for _, m := range srv.Messages("events.ordered") {
			var e orderedEvent
			if err := json.Unmarshal(m.Data, &e); err != nil {
				t.Fatalf("message %s: %v", m.ID, err)
			}
			accepted = append(accepted, e)
		}
		assertInOrder(t, accepted, keys, perKey)
	})
}

// TestProcess_PubSubOutageAndThrottlingHoldRows stops the fake, then makes
// it throttle every publish: meanwhile rows wait in the table without
// spending attempts, /readyz says why, and once Pub/Sub takes publishes
// again every row arrives.
func TestProcess_PubSubOutageAndThrottlingHoldRows(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, "events.orders.created")
	p := startProcess(t, pubsubRelayEnv(db, srv, "RELAY_BACKOFF_MIN=100ms", "RELAY_BACKOFF_MAX=1s")...)
	p.waitLog(`"connected to Pub/Sub"`)
	p.metrics() // the endpoint's address is known
	insert := func(n int) {
		db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) SELECT 'orders.created', convert_to(i::text, 'UTF8'), 'k' || (i % 7) FROM generate_series(1, $1) AS i`, n)
	}
	readyzSays := func(what string) {
		t.Helper()
		waitfor.Condition(t, 20*time.Second, "/readyz to say "+what, func() bool {
			code, body := get(t, "http://"+p.addr+"/readyz")
			return code == 503 && strings.Contains(body, "pubsub") && strings.Contains(body, what)
		})
	}

	srv.Stop()
	readyzSays("does not answer")
	insert(50)
	time.Sleep(time.Second) // claims the relay would make, if it made any
	if got := db.CountWhere(t, "messages_all", "attempts > 0"); got != 0 {
		t.Errorf("%d rows spent attempts while Pub/Sub was down", got)
	}
	srv.Restart()
	relaytest.WaitDrained(t, db, relaytest.Budget(50))

	srv.FailPublish(func(*pubsubpb.PublishRequest) error {
		return status.Error(codes.ResourceExhausted, "quota exceeded")
	})
	insert(50)
	readyzSays("throttles")
	if n := db.Count(t, "dead_letters"); n != 0 {
		t.Fatalf("%d rows dead-lettered while throttled", n)
	}
	srv.FailPublish(nil)
	relaytest.WaitDrained(t, db, relaytest.Budget(50))
	if n := len(srv.Messages("events.orders.created")); n < 100 {
		t.Fatalf("Pub/Sub holds %d messages, want the 100 rows", n)
	}
	if n := db.Count(t, "dead_letters"); n != 0 {
		t.Fatalf("%d rows dead-lettered", n)
	}
}

// TestProcess_PubSubOversizeRowIsDeadLetteredAlone writes a row over
// Pub/Sub's 10 MB between rows of its key: it alone goes to the dead
// letters, at once, and the others arrive.
func TestProcess_PubSubOversizeRowIsDeadLetteredAlone(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := pubsubtest.Start(t)
	srv.CreateTopic(t, "events.orders.created")
	p := startProcess(t, pubsubRelayEnv(db, srv)...)
	p.waitLog(`"connected to Pub/Sub"`)
	db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, idempotency_key)
SELECT 'orders.created',
       CASE WHEN i = 5 THEN convert_to(repeat('x', 10500000), 'UTF8') ELSE convert_to(i::text, 'UTF8') END,
       CASE WHEN i % 2 = 1 THEN 'k' END, 'row-' || i
  FROM generate_series(1, $1) AS i`, 9)
	relaytest.WaitDrained(t, db, relaytest.Budget(9))
	rows, err := db.Pool.Query(context.Background(), "SELECT idempotency_key, reason, error, attempts FROM "+db.Table("dead_letters"))
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for rows.Next() {
		var id, reason, msg string
		var attempts int
		if err := rows.Scan(&id, &reason, &msg, &attempts); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, id)
		if id != "row-5" || reason != "permanent" || attempts != 1 || !strings.Contains(msg, "10 MB") {
			t.Errorf("dead letter %s: reason %s, %d attempts, error %q; want row-5 alone, permanent at its first attempt, naming the limit", id, reason, attempts, msg)
		}
	}
	if len(dead) != 1 {
		t.Errorf("dead letters %v, want row-5 alone", dead)
	}
	if n := len(srv.Messages("events.orders.created")); n != 8 {
		t.Errorf("Pub/Sub holds %d messages, want the 8 other rows", n)
	}
}
