package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/waitfor"
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
