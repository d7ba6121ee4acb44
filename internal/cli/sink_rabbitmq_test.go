package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

func TestRun_RefusesBadRabbitMQConfiguration(t *testing.T) {
	t.Parallel()
	const url = "RABBITMQ_URL=amqp://relay:hunter2@rabbit:5672/events"
	const tlsURL = "RABBITMQ_URL=amqps://relay:hunter2@rabbit:5671/events"
	cases := []struct {
		env  []string
		want []string
	}{
		{[]string{"RABBITMQ_URL=http://relay:hunter2@rabbit:5672/"}, []string{"RABBITMQ_URL", `unsupported scheme "http"`, "not shown"}},
		{[]string{"RABBITMQ_URL=amqp://relay:hunter2@rabbit:port/"}, []string{"RABBITMQ_URL", "not shown"}},
		{[]string{"RABBITMQ_URL=amqp:///events"}, []string{"RABBITMQ_URL", "host"}},
		{[]string{url, "RABBITMQ_EXCHANGE=bad exchange"}, []string{`RABBITMQ_EXCHANGE="bad exchange"`, "1 to 255 letters"}},
		{[]string{url, "RABBITMQ_CONFIRM_TIMEOUT=0s"}, []string{`RABBITMQ_CONFIRM_TIMEOUT="0s"`, "not positive"}},
		{[]string{url, "RABBITMQ_CONFIRM_TIMEOUT=19s", "RELAY_SINK=nats"}, []string{`RELAY_LEASE="30s"`, "RABBITMQ_CONFIRM_TIMEOUT=19s"}},
		{[]string{url, "RABBITMQ_TLS_CA_FILE=/ca.pem", "RELAY_SINK=nats"}, []string{"RABBITMQ_TLS_CA_FILE", "amqps://"}},
		{[]string{"RABBITMQ_TLS_CA_FILE=/ca.pem"}, []string{"RABBITMQ_TLS_CA_FILE", "amqps://"}},
		{[]string{tlsURL, "RABBITMQ_TLS_CERT_FILE=/cert.pem", "RELAY_SINK=nats"}, []string{"RABBITMQ_TLS_CERT_FILE", "without RABBITMQ_TLS_KEY_FILE"}},
		{[]string{tlsURL, "RABBITMQ_TLS_KEY_FILE=/key.pem", "RELAY_SINK=nats"}, []string{"RABBITMQ_TLS_KEY_FILE", "without RABBITMQ_TLS_CERT_FILE"}},
		{[]string{url, "RABBITMQ_MAX_MESSAGE_BYTES=536870913", "RELAY_SINK=nats"}, []string{`RABBITMQ_MAX_MESSAGE_BYTES="536870913"`, "1 to 536870912"}},
		{[]string{url, "RABBITMQ_MAX_MESSAGE_BYTES=-1", "RELAY_SINK=nats"}, []string{`RABBITMQ_MAX_MESSAGE_BYTES="-1"`}},
		{[]string{url}, []string{"RELAY_SINK", "nats or rabbitmq"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.env, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := append([]string{"DATABASE_URL=postgres://u@127.0.0.1:1/db", "NATS_URL=nats://127.0.0.1:1"}, c.env...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if code := run(ctx, []string{"run"}, env, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit code %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not contain %q", stderr.String(), w)
				}
			}
			if strings.Contains(stderr.String(), "hunter2") {
				t.Errorf("stderr shows the password: %s", stderr.String())
			}
		})
	}
}

// rabbitmqEnvFor is the environment of a relay delivering db's rows to v
// only.
func rabbitmqEnvFor(db *dbtest.Schema, v *rabbitmqtest.VHost, extra ...string) []string {
	return append([]string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name, "RABBITMQ_URL=" + v.URL, "RELAY_SINK=rabbitmq"}, extra...)
}

func TestProcess_RabbitMQDeliversRowsByteForByte(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	v := rabbitmqtest.New(t)
	v.BindQueue(t, "orders", "amq.topic", "orders.#", nil)
	p := startProcess(t, rabbitmqEnvFor(db, v)...)
	p.waitLog("RabbitMQ exchange exists")

	const bulk = 500
	relaytest.InsertRows(t, db, bulk, "orders.bulk")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, headers, idempotency_key) VALUES
	  ('orders.created', convert_to('{"order_id": 42}', 'UTF8'), 'order-42', '{"content-type": "application/json", "x-tenant": "acme", "CC": "elsewhere"}', 'order-42-created'),
	  ('orders.paid', '\x00ff0d0a'::bytea, NULL, NULL, 'order-42-paid'),
	  ('orders.empty', '', NULL, NULL, 'order-42-empty')`)
	relaytest.WaitDrained(t, db, relaytest.Budget(bulk))

	archived := relaytest.Archive(t, db, "true")
	if len(archived) != bulk+3 {
		t.Fatalf("archive holds %d delivered rows, want %d", len(archived), bulk+3)
	}
	got := v.WaitTake(t, "orders", bulk+3, relaytest.Budget(bulk))
	seen := map[string]amqp.Delivery{}
	for _, d := range got {
		seen[d.MessageId] = d
	}
	for key, row := range archived {
		d, ok := seen[key]
		if !ok {
			t.Fatalf("row %s was archived as delivered but is not in the queue", key)
		}
		if !bytes.Equal(d.Body, row.Payload) {
			t.Fatalf("message %s: body %q, want %q", key, d.Body, row.Payload)
		}
		if d.DeliveryMode != amqp.Persistent || d.ContentType != row.Headers["content-type"] {
			t.Fatalf("message %s: delivery_mode %d, content_type %q; want 2 and %q", key, d.DeliveryMode, d.ContentType, row.Headers["content-type"])
		}
		for k, want := range row.Headers {
			if k == "content-type" || k == "CC" {
				continue
			}
			if d.Headers[k] != want {
				t.Fatalf("message %s: header %s = %v, want %q", key, k, d.Headers[k], want)
			}
		}
		if _, ok := d.Headers["CC"]; ok {
			t.Fatalf("message %s carries the row's CC header, which would route it to more queues", key)
		}
	}
	for _, line := range p.log() {
		if strings.Contains(line, "guest:guest@") {
			t.Fatalf("the log shows the URL's password: %s", line)
		}
	}
}

func TestProcess_RABBITMQ_EXCHANGEMissingIsAStartupProblemUntilDeclared(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	v := rabbitmqtest.New(t)
	p := startProcess(t, rabbitmqEnvFor(db, v, "RABBITMQ_EXCHANGE=outbox.events", "RELAY_BACKOFF_MIN=100ms", "RELAY_BACKOFF_MAX=500ms")...)
	waitfor.Condition(t, 30*time.Second, "the no_exchange problem in /metrics", func() bool {
		return strings.Contains(p.metrics(), `outbox_relay_sink_problem{problem="no_exchange",sink="rabbitmq"} 1`)
	})
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('orders.created', 'first', 'first-1')`)
	p.waitLog("no exchange 'outbox.events'")

	v.DeclareExchange(t, "outbox.events", amqp.ExchangeTopic)
	v.BindQueue(t, "orders", "outbox.events", "orders.#", nil)
	relaytest.WaitDrained(t, db, 30*time.Second)
	got := v.WaitTake(t, "orders", 1, 30*time.Second)
	if len(got) != 1 || string(got[0].Body) != "first" || got[0].Exchange != "outbox.events" {
		t.Errorf("queue holds %d messages (%v), want the row, through outbox.events", len(got), got)
	}
}
