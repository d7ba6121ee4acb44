package cli

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
)

// TestProcess_KafkaSinkDeliversPlainSQLRows runs the binary with
// KAFKA_BROKERS at an in-process cluster and RELAY_SINK=kafka: rows written
// with plain SQL arrive as records byte for byte, with their keys, headers
// and idempotency keys, in the topic under KAFKA_TOPIC_PREFIX, and leave the
// hot table.
func TestProcess_KafkaSinkDeliversPlainSQLRows(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c := kafkatest.Start(t)
	const topic = "events.orders.created"
	c.CreateTopic(t, topic, 4)
	p := startProcess(t,
		"DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name,
		"KAFKA_BROKERS="+c.BrokerList(), "KAFKA_TOPIC_PREFIX=events.", "RELAY_SINK=kafka",
		"NATS_URL=nats://127.0.0.1:1", // a second sink that is down must not hold up the first
	)
	p.waitLog(`"connected to Kafka"`)

	const n = 500
	db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, headers)
SELECT 'orders.created',
       CASE WHEN i = 1 THEN ''::bytea
            ELSE '\x00ff'::bytea || convert_to(json_build_object('seq', i, 'note', 'naïve café')::text, 'UTF8') END,
       CASE WHEN i % 3 = 0 THEN 'order-' || (i % 17) END,
       CASE WHEN i % 2 = 0 THEN jsonb_build_object('content-type', 'application/json', 'traceparent', '00-' || lpad(to_hex(i), 32, '0') || '-00f067aa0ba902b7-01', 'Idempotency-Key', 'forged') END
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

	var records int
	waitfor.Condition(t, 30*time.Second, "every record in Kafka", func() bool {
		records = len(c.Records(t, topic))
		return records >= n
	})
	seen := map[string]bool{}
	for _, rec := range c.Records(t, topic) {
		var ids []string
		headers := map[string]string{}
		for _, h := range rec.Headers {
			if strings.EqualFold(h.Key, "Idempotency-Key") {
				ids = append(ids, string(h.Value))
				continue
			}
			headers[h.Key] = string(h.Value)
		}
		if len(ids) != 1 {
			t.Fatalf("record at offset %d/%d has idempotency keys %q, want one", rec.Partition, rec.Offset, ids)
		}
		id := ids[0]
		r, ok := archived[id]
		if !ok {
			t.Fatalf("record %s is not in the archive", id)
		}
		if seen[id] {
			t.Errorf("record %s is twice in Kafka", id)
		}
		seen[id] = true
		if !bytes.Equal(rec.Value, r.payload) || rec.Value == nil {
			t.Errorf("record %s value %q, want %q", id, rec.Value, r.payload)
		}
		switch {
		case r.key == nil && rec.Key != nil:
			t.Errorf("record %s has key %q, the row none", id, rec.Key)
		case r.key != nil && string(rec.Key) != *r.key:
			t.Errorf("record %s has key %q, want %q", id, rec.Key, *r.key)
		}
		for k, v := range r.headers {
			if strings.EqualFold(k, "Idempotency-Key") {
				continue
			}
			if headers[k] != v {
				t.Errorf("record %s header %s = %q, want %q", id, k, headers[k], v)
			}
		}
	}
	if len(seen) != n {
		t.Errorf("Kafka holds %d of the %d messages", len(seen), n)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(20 * time.Second); code != 0 {
		t.Errorf("after SIGTERM the relay exited %d, want 0", code)
	}
}

// TestProcess_KafkaTLSAndSASLAndOutcomes runs the binary against a cluster
// that requires TLS and SCRAM: with the KAFKA_TLS_* and KAFKA_SASL_*
// variables the rows arrive; a row over KAFKA_MAX_MESSAGE_BYTES goes to
// the dead letters at once, and a row for a missing topic waits in the hot
// table with an error that names the topic.
func TestProcess_KafkaTLSAndSASLAndOutcomes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	certs := kafkatest.NewTLS(t)
	c := kafkatest.Start(t, kfake.TLS(certs.Server), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "relay", "relay-s3cret"))
	clientTLS, err := kafkasink.TLS{Enabled: true, CAFile: certs.CAFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	c.SetClientOpts(kgo.DialTLSConfig(clientTLS), kgo.SASL(scram.Auth{User: "relay", Pass: "relay-s3cret"}.AsSha512Mechanism()))
	c.CreateTopic(t, "orders.created", 1)

	p := startProcess(t,
		"DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name,
		"KAFKA_BROKERS="+c.BrokerList(),
		"KAFKA_TLS=true", "KAFKA_TLS_CA_FILE="+certs.CAFile,
		"KAFKA_SASL_MECHANISM=SCRAM-SHA-512", "KAFKA_SASL_USERNAME=relay", "KAFKA_SASL_PASSWORD=relay-s3cret",
		"KAFKA_MAX_MESSAGE_BYTES=4096",
		"RELAY_BACKOFF_MIN=100ms", "RELAY_BACKOFF_MAX=200ms",
	)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES
	  ('orders.created', 'small', 'ok-1'),
	  ('orders.created', convert_to(repeat('x', 8192), 'UTF8'), 'too-large-1'),
	  ('orders.missing', 'lost?', 'missing-1')`)

	waitfor.Condition(t, 30*time.Second, "the small row delivered and the large one dead-lettered", func() bool {
		return db.Count(t, "archive") == 1 && db.Count(t, "dead_letters") == 1
	})
	recs := c.Records(t, "orders.created")
	if len(recs) != 1 || string(recs[0].Value) != "small" {
		t.Errorf("orders.created holds %d records, want only the small one", len(recs))
	}
	var reason, deadErr string
	if err := db.Pool.QueryRow(context.Background(), "SELECT reason, error FROM "+db.Table("dead_letters")+" WHERE idempotency_key = 'too-large-1'").Scan(&reason, &deadErr); err != nil {
		t.Fatal(err)
	}
	if reason != "permanent" || !strings.Contains(deadErr, "too large") {
		t.Errorf("the large row is dead with reason %q, error %q; want permanent, too large", reason, deadErr)
	}
	var lastErr *string
	waitfor.Condition(t, 30*time.Second, "the row for the missing topic to fail", func() bool {
		err := db.Pool.QueryRow(context.Background(), "SELECT last_error FROM "+db.Table("messages")+" WHERE idempotency_key = 'missing-1'").Scan(&lastErr)
		return err == nil && lastErr != nil
	})
	if !strings.Contains(*lastErr, "orders.missing") || !strings.Contains(*lastErr, "does not exist") {
		t.Errorf("the row for the missing topic has error %q, want one that says orders.missing does not exist", *lastErr)
	}

	// Created, the topic takes the row on a retry.
	c.CreateTopic(t, "orders.missing", 1)
	relaytest.WaitDrained(t, db, 30*time.Second)
	if recs := c.Records(t, "orders.missing"); len(recs) != 1 || string(recs[0].Value) != "lost?" {
		t.Errorf("orders.missing holds %d records, want the retried row", len(recs))
	}
	for _, line := range p.log() {
		if strings.Contains(line, "relay-s3cret") {
			t.Errorf("the log shows the password: %s", line)
		}
	}
}
