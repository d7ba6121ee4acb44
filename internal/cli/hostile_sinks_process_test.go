package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/webhooktest"
)

// The process tests of issue 22: nothing a producer writes, and no limit of
// a broker, strands a batch. Each sink refuses what its destination can never
// take before sending it, as a permanent failure naming the limit, and the
// other rows in flight are not touched.

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
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, headers, idempotency_key)
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
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, headers, idempotency_key) VALUES
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
