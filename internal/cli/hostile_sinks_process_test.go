package cli

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// Nothing a producer writes, and no limit of a broker, strands a batch.
// Each sink refuses what its destination can never take before sending it,
// as a permanent failure naming the limit, and the other rows in flight are
// not touched. The insert guard refuses headers over 16 KiB since migration
// 8, so rows with more are written as rows that skipped it (ExecAsRelay: a
// row written before, or by a session that skips triggers), which the
// sinks' budget still meets.

// deadLetter returns the reason and error of the dead letter with key, once
// it is there.
func deadLetter(t *testing.T, db *dbtest.Schema, key string) (reason, errText string) {
	t.Helper()
	waitfor.Condition(t, 60*time.Second, "row "+key+" in the dead letters", func() bool {
		return db.Pool.QueryRow(context.Background(),
			"SELECT reason, error FROM "+db.Table("dead_letters")+" WHERE idempotency_key = $1", key).Scan(&reason, &errText) == nil
	})
	return reason, errText
}

// wantPermanent fails t unless the row with key is dead-lettered as
// permanent, after one attempt, with an error holding every one of want.
func wantPermanent(t *testing.T, db *dbtest.Schema, key string, want ...string) {
	t.Helper()
	reason, errText := deadLetter(t, db, key)
	if reason != "permanent" {
		t.Errorf("row %s is dead with reason %q (error %q), want permanent", key, reason, errText)
	}
	for _, w := range want {
		if !strings.Contains(errText, w) {
			t.Errorf("row %s is dead with error %q, which does not say %q", key, errText, w)
		}
	}
	var attempts int
	if err := db.Pool.QueryRow(context.Background(),
		"SELECT attempts FROM "+db.Table("dead_letters")+" WHERE idempotency_key = $1", key).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Errorf("row %s was dead-lettered after %d attempts, want 1: it was retried", key, attempts)
	}
}

// logHas reports whether a line of p's log holds every one of parts.
func logHas(p *process, parts ...string) bool {
	for _, line := range p.log() {
		ok := true
		for _, s := range parts {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestProcess_HostileRabbitMQHeaderOverTheFrameIsDeadLetteredAlone: a row
// whose headers are larger than the broker's frame (128 KiB) used to close
// the AMQP connection, be retried as transient, and kill the connection
// again on each attempt, sending the other messages in flight twice. It is
// refused before publishing, as a permanent failure naming the sizes; the
// connection stays up and every other row arrives exactly once. A row's own
// Idempotency-Key header cannot contradict message_id.
func TestProcess_HostileRabbitMQHeaderOverTheFrameIsDeadLetteredAlone(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	v := rabbitmqtest.New(t)
	v.BindQueue(t, "orders", "amq.topic", "orders.#", nil)
	const n = 20
	db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, headers, idempotency_key)
SELECT 'orders.created', convert_to('{"seq": ' || i || '}', 'UTF8'),
       CASE WHEN i = 7 THEN jsonb_build_object('x-trace', repeat('x', 200 * 1024))
            WHEN i = 9 THEN '{"Idempotency-Key": "forged", "idempotency-key": "forged-too"}'::jsonb END,
       CASE WHEN i = 7 THEN 'huge-headers' ELSE 'row-' || i END
  FROM generate_series(1, $1) AS i`, n+1)
	p := startProcess(t, rabbitmqEnvFor(db, v, "RELAY_BACKOFF_MIN=100ms", "RELAY_BACKOFF_MAX=200ms")...)

	wantPermanent(t, db, "huge-headers", "bytes")
	relaytest.WaitDrained(t, db, 30*time.Second)
	got := v.WaitTake(t, "orders", n, 30*time.Second)
	seen := map[string]int{}
	for _, d := range got {
		seen[d.MessageId]++
		if d.MessageId == "row-9" {
			if ik, ok := d.Headers["Idempotency-Key"]; ok && ik != d.MessageId {
				t.Errorf("message row-9 carries Idempotency-Key %v beside message_id %q", ik, d.MessageId)
			}
			if _, ok := d.Headers["idempotency-key"]; ok {
				t.Errorf("message row-9 carries the row's idempotency-key header %v", d.Headers["idempotency-key"])
			}
		}
	}
	if len(got) != n || len(seen) != n {
		t.Errorf("the queue holds %d messages with %d ids, want each of the %d rows once: %v", len(got), len(seen), n, seen)
	}
	if seen["huge-headers"] != 0 {
		t.Error("the row with huge headers reached the queue")
	}
	if logHas(p, "connection to RabbitMQ lost") {
		t.Error("the connection to RabbitMQ was lost: the row with huge headers reached the broker")
	}
}

// TestProcess_HostileRabbitMQBodyOverMaxMessageBytes: a payload over
// RABBITMQ_MAX_MESSAGE_BYTES is dead-lettered without being published, so
// the broker never closes the channel over it.
func TestProcess_HostileRabbitMQBodyOverMaxMessageBytes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	v := rabbitmqtest.New(t)
	v.BindQueue(t, "orders", "amq.topic", "orders.#", nil)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES
	  ('orders.created', 'small', 'small-1'),
	  ('orders.created', convert_to(repeat('x', 65537), 'UTF8'), 'too-large-1'),
	  ('orders.created', convert_to(repeat('x', 65536), 'UTF8'), 'just-fits-1')`)
	p := startProcess(t, rabbitmqEnvFor(db, v, "RABBITMQ_MAX_MESSAGE_BYTES=65536")...)
	wantPermanent(t, db, "too-large-1", "65537", "65536", "RABBITMQ_MAX_MESSAGE_BYTES")
	relaytest.WaitDrained(t, db, 30*time.Second)
	got := v.WaitTake(t, "orders", 2, 30*time.Second)
	if len(got) != 2 {
		t.Errorf("the queue holds %d messages, want the 2 that fit", len(got))
	}
	if logHas(p, "RabbitMQ closed the channel") {
		t.Error("the broker closed the channel: the large row was published")
	}
}

// TestProcess_HostileWebhookBodyAndHeaders: a body over
// WEBHOOK_MAX_BODY_BYTES is dead-lettered without being posted; headers a
// receiver or a proxy in front of it would act on (Forwarded,
// X-Forwarded-*, method overrides, Content-Encoding, hop-by-hop and framing
// headers) never reach it from a row, which is delivered without them; a
// row whose headers pass the relay's header budget is dead-lettered.
func TestProcess_HostileWebhookBodyAndHeaders(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	forbidden := map[string]string{
		"Forwarded":              "for=203.0.113.7;host=admin.internal",
		"X-Forwarded-For":        "127.0.0.1",
		"X-Forwarded-Host":       "admin.internal",
		"X-Forwarded-Proto":      "https",
		"X-HTTP-Method-Override": "DELETE",
		"X-Method-Override":      "DELETE",
		"X-HTTP-Method":          "DELETE",
		"Content-Encoding":       "gzip",
		"Transfer-Encoding":      "chunked",
		"Connection":             "close",
		"Host":                   "admin.internal",
		"Content-Length":         "1",
		"Te":                     "trailers",
		"Upgrade":                "websocket",
		"Proxy-Authorization":    "Basic Zm9vOmJhcg==",
		"Keep-Alive":             "timeout=5",
		"Trailer":                "Expires",
		"Webhook-Id":             "forged",
		"Idempotency-Key":        "forged",
	}
	var headers strings.Builder
	headers.WriteString(`{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`)
	for k, v := range forbidden {
		headers.WriteString(`, "` + k + `": "` + v + `"`)
	}
	headers.WriteString("}")
	db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, headers, idempotency_key) VALUES
	  ('orders.created', '{"ok": true}', $1::jsonb, 'stripped-1'),
	  ('orders.created', convert_to(repeat('x', 65537), 'UTF8'), NULL, 'too-large-1'),
	  ('orders.created', convert_to(repeat('x', 65536), 'UTF8'), NULL, 'just-fits-1'),
	  ('orders.created', 'big headers', jsonb_build_object('x-big', repeat('h', 20000)), 'big-headers-1')`, headers.String())
	startProcess(t,
		"DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name,
		"WEBHOOK_URL="+rcv.URL, "WEBHOOK_SECRET="+rcv.Secret, "WEBHOOK_MAX_BODY_BYTES=65536")

	wantPermanent(t, db, "too-large-1", "65537", "65536", "WEBHOOK_MAX_BODY_BYTES")
	wantPermanent(t, db, "big-headers-1", "header", "16384")
	relaytest.WaitDrained(t, db, 30*time.Second)
	for _, r := range rcv.Requests() {
		switch r.ID() {
		case "too-large-1", "big-headers-1":
			t.Errorf("row %s was posted", r.ID())
		case "stripped-1":
			for k, v := range forbidden {
				// Content-Length, Webhook-Id and Idempotency-Key are
				// sent, with the relay's values.
				if vals := r.Header.Values(k); slices.Contains(vals, v) || len(vals) > 0 && !(k == "Content-Length" || k == "Webhook-Id" || k == "Idempotency-Key") {
					t.Errorf("the receiver got the row's %s: %q", k, vals)
				}
			}
			if got := r.Header.Values("Webhook-Id"); len(got) != 1 || got[0] != "stripped-1" {
				t.Errorf("webhook-id %q, want the relay's stripped-1", got)
			}
			if got := r.Header.Values("Idempotency-Key"); len(got) != 1 || got[0] != "stripped-1" {
				t.Errorf("Idempotency-Key %q, want the relay's stripped-1", got)
			}
			if r.Host != strings.TrimPrefix(rcv.Server.URL, "http://") {
				t.Errorf("request for host %q, want the URL's", r.Host)
			}
			if r.Header.Get("traceparent") == "" {
				t.Error("the row's traceparent did not arrive")
			}
		}
	}
	if rcv.Arrived("stripped-1") != 1 || rcv.Arrived("just-fits-1") != 1 {
		t.Errorf("stripped-1 arrived %d times, just-fits-1 %d times; want once each", rcv.Arrived("stripped-1"), rcv.Arrived("just-fits-1"))
	}
}

// TestProcess_HostileNATSLimitsAndPrefix: without NATS_SUBJECT_PREFIX the
// relay warns at start, naming the variable; a message whose headers and
// payload together pass the server's max_payload, or whose headers pass the
// relay's header budget, is dead-lettered before publishing; a row's own
// Idempotency-Key header never contradicts Nats-Msg-Id.
func TestProcess_HostileNATSLimitsAndPrefix(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = 32 * 1024 })
	srv.CreateStream(t, "ORDERS", "orders.>")
	db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, headers, idempotency_key) VALUES
	  ('orders.created', 'small', '{"Idempotency-Key": "forged"}', 'small-1'),
	  ('orders.created', convert_to(repeat('x', 20000), 'UTF8'), jsonb_build_object('x-pad', repeat('h', 15000)), 'over-max-payload-1'),
	  ('orders.created', 'big headers', jsonb_build_object('x-big', repeat('h', 20000)), 'big-headers-1')`)
	p := startProcess(t, relayEnv(db, srv)...)
	p.waitLog("NATS_SUBJECT_PREFIX")
	if !logHas(p, `"level":"WARN"`, "NATS_SUBJECT_PREFIX") {
		t.Error("no warning naming NATS_SUBJECT_PREFIX")
	}
	wantPermanent(t, db, "over-max-payload-1", "max_payload", "32768")
	wantPermanent(t, db, "big-headers-1", "header", "16384")
	relaytest.WaitDrained(t, db, 30*time.Second)
	msgs := srv.Messages(t, "ORDERS")
	if len(msgs) != 1 {
		t.Fatalf("the stream holds %d messages, want the small one", len(msgs))
	}
	if got := msgs[0].Header.Values("Idempotency-Key"); len(got) > 0 && (len(got) != 1 || got[0] != "small-1") {
		t.Errorf("the message carries Idempotency-Key %q beside Nats-Msg-Id %q", got, msgs[0].Header.Get("Nats-Msg-Id"))
	}
}

// TestProcess_HostileNATSSubjectPrefixRefused: a NATS_SUBJECT_PREFIX with a
// control character, whitespace or a wildcard stops the relay at start,
// naming the variable.
func TestProcess_HostileNATSSubjectPrefixRefused(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"events\x01.", "ev\x7fents.", "events\u00a0.", "ev*.", "ev>.", "ev ents."} {
		// A prefix that passes goes on to wait for the database: the
		// deadline turns that into a failure instead of a hang.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, binary, "run")
		cmd.Env = []string{"DATABASE_URL=postgres://u@127.0.0.1:1/db", "NATS_URL=nats://127.0.0.1:1", "NATS_SUBJECT_PREFIX=" + prefix, "RELAY_HTTP_ADDR="}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		cancel()
		if code := cmd.ProcessState.ExitCode(); err == nil || code != exitUsage {
			t.Errorf("NATS_SUBJECT_PREFIX=%q: exit code %d, want %d (%s)", prefix, code, exitUsage, stderr.String())
		}
		if !strings.Contains(stderr.String(), "NATS_SUBJECT_PREFIX") {
			t.Errorf("NATS_SUBJECT_PREFIX=%q: the error does not name the variable: %s", prefix, stderr.String())
		}
	}
}

// TestProcess_HostileKafkaInternalTopics: without KAFKA_TOPIC_PREFIX the
// relay warns at start, naming the variable, and a row naming one of the
// ecosystem's internal topics (Kafka's, Kafka Connect's, Schema Registry's,
// Confluent's and ksqlDB's, MirrorMaker's) is dead-lettered, even when the
// topic exists; a row whose headers pass the header budget too.
func TestProcess_HostileKafkaInternalTopics(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c := kafkatest.Start(t)
	internal := []string{
		"connect-configs", "connect-offsets", "connect-status", "connect-cluster-offsets",
		"_schemas", "_confluent-metrics", "_confluent-ksql-default__command_topic",
		"__consumer_offsets", "__transaction_state", "mm2-offset-syncs.east.internal",
	}
	c.CreateTopic(t, "orders.created", 1)
	for _, topic := range internal {
		if !strings.HasPrefix(topic, "__") {
			c.CreateTopic(t, topic, 1)
		}
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('orders.created', 'ok', 'ok-1')`)
	for _, topic := range internal {
		db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ($1, '{"poison": true}', $1)`, topic)
	}
	db.ExecAsRelay(t, `INSERT INTO %s.messages (topic, payload, headers, idempotency_key) VALUES
	  ('orders.created', 'big headers', jsonb_build_object('x-big', repeat('h', 20000)), 'big-headers-1')`)
	p := startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "KAFKA_BROKERS="+c.BrokerList())
	p.waitLog("KAFKA_TOPIC_PREFIX")
	if !logHas(p, `"level":"WARN"`, "KAFKA_TOPIC_PREFIX") {
		t.Error("no warning naming KAFKA_TOPIC_PREFIX")
	}
	for _, topic := range internal {
		wantPermanent(t, db, topic, topic, "internal")
	}
	wantPermanent(t, db, "big-headers-1", "header", "16384")
	relaytest.WaitDrained(t, db, 30*time.Second)
	for _, topic := range internal {
		if strings.HasPrefix(topic, "__") {
			continue
		}
		if recs := c.Records(t, topic); len(recs) != 0 {
			t.Errorf("internal topic %s holds %d records from rows", topic, len(recs))
		}
	}
	if recs := c.Records(t, "orders.created"); len(recs) != 1 || string(recs[0].Value) != "ok" {
		t.Errorf("orders.created holds %d records, want the ok row alone", len(recs))
	}
}
