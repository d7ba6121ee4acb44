package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/pubsubtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/redistest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/sinks"
	pubsubsink "github.com/outbox-relay/outbox-relay/sinks/pubsub"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	snssink "github.com/outbox-relay/outbox-relay/sinks/sns"
	sqssink "github.com/outbox-relay/outbox-relay/sinks/sqs"
)

// The hostile-row suite through the real binary: every row the sinks'
// suite generates (sinktest.HostileRows) that PostgreSQL can store is
// written with the insert guard skipped (as rows written before it, or by
// a session without triggers), between ordinary rows of the same key in
// the same transaction, and the binary runs with each sink, and with NATS
// in every mode. The invariant: every ordinary row is delivered once and
// arrives; every hostile row is delivered or dead-lettered, as permanent
// on its first attempt unless only its topic is hostile (a topic no
// destination routes may be retried until its attempts run out); no
// broker connection is lost. Beside them, a row due at the earliest time
// PostgreSQL has is delivered and one due at its latest finite time waits
// in the hot table, holding up no other row.

// hostileSink is one sink the suite runs the binary with.
type hostileSink struct {
	name string
	// start prepares the destination and returns the binary's sink
	// settings and what reached the destination: idempotency key → copies.
	start func(t *testing.T, db *dbtest.Schema) (env []string, arrived func() map[string]int)
	// lost is a log line that says a broker connection was lost.
	lost string
}

var hostileSinks = []hostileSink{
	{name: "nats", lost: "closed the connection for good", start: func(t *testing.T, db *dbtest.Schema) ([]string, func() map[string]int) {
		srv := natstest.Start(t)
		srv.CreateStream(t, "HOSTILE", "sinktest.>")
		return []string{"NATS_URL=" + srv.URL()}, func() map[string]int {
			got := map[string]int{}
			for _, m := range srv.Messages(t, "HOSTILE") {
				got[m.Header.Get("Nats-Msg-Id")]++
			}
			return got
		}
	}},
	{name: "webhook", lost: "\x00never", start: func(t *testing.T, db *dbtest.Schema) ([]string, func() map[string]int) {
		rcv := webhooktest.NewReceiver(t)
		return []string{"WEBHOOK_URL=" + rcv.URL, "WEBHOOK_SECRET=" + rcv.Secret}, func() map[string]int {
			got := map[string]int{}
			for _, req := range rcv.Requests() {
				if req.Status >= 200 && req.Status < 300 {
					got[req.ID()]++
				}
			}
			return got
		}
	}},
	{name: "kafka", lost: "\x00never", start: func(t *testing.T, db *dbtest.Schema) ([]string, func() map[string]int) {
		c := kafkatest.Start(t)
		c.CreateTopic(t, sinktest.Topic, 2)
		return []string{"KAFKA_BROKERS=" + c.BrokerList(), "RELAY_SINK=kafka"}, func() map[string]int {
			got := map[string]int{}
			for _, r := range c.Records(t, sinktest.Topic) {
				for _, h := range r.Headers {
					if h.Key == "Idempotency-Key" {
						got[string(h.Value)]++
					}
				}
			}
			return got
		}
	}},
	{name: "rabbitmq", lost: "connection to RabbitMQ lost", start: func(t *testing.T, db *dbtest.Schema) ([]string, func() map[string]int) {
		v := rabbitmqtest.New(t)
		v.BindQueue(t, "hostile", "amq.topic", "sinktest.#", nil)
		got := map[string]int{}
		return []string{"RABBITMQ_URL=" + v.URL, "RELAY_SINK=rabbitmq"}, func() map[string]int {
			for _, d := range v.Take(t, "hostile") {
				got[d.MessageId]++
			}
			return got
		}
	}},
	{name: "pubsub", lost: "Pub/Sub cannot take deliveries", start: func(t *testing.T, db *dbtest.Schema) ([]string, func() map[string]int) {
		srv := pubsubtest.Start(t)
		srv.CreateTopic(t, sinktest.Topic)
		return []string{"PUBSUB_PROJECT=" + pubsubtest.Project, "PUBSUB_EMULATOR_HOST=" + srv.Addr(), "RELAY_SINK=pubsub"}, func() map[string]int {
			got := map[string]int{}
			for _, m := range srv.Messages(sinktest.Topic) {
				got[m.Attributes[pubsubsink.IdempotencyKeyAttribute]]++
			}
			return got
		}
	}},
	{name: "redis", lost: "Redis does not answer", start: func(t *testing.T, db *dbtest.Schema) ([]string, func() map[string]int) {
		srv := redistest.Start(t)
		return []string{"REDIS_URL=" + srv.URL(), "RELAY_SINK=redis"}, func() map[string]int {
			got := map[string]int{}
			for _, e := range srv.AllEntries(t) {
				if id, ok := e.Field("idempotency_key"); ok {
					got[id]++
				}
			}
			return got
		}
	}},
	{name: "sqs", lost: "SQS cannot take deliveries", start: func(t *testing.T, db *dbtest.Schema) ([]string, func() map[string]int) {
		srv := sqstest.Start(t)
		u := srv.CreateQueue(t, "hostile.fifo", nil)
		return append(sqsProcessEnv(srv), "SQS_QUEUE_URL="+u, "RELAY_SINK=sqs"), func() map[string]int {
			got := map[string]int{}
			for _, m := range srv.Received(t, u) {
				if v, ok := m.MessageAttributes[sqssink.IdempotencyKeyAttribute]; ok && v.StringValue != nil {
					got[*v.StringValue]++
				}
			}
			return got
		}
	}},
	{name: "sns", lost: "SNS cannot take deliveries", start: func(t *testing.T, db *dbtest.Schema) ([]string, func() map[string]int) {
		srv := sqstest.Start(t)
		arn, u := srv.CreateTopic(t, "hostile.fifo")
		return append(snsProcessEnv(srv), "SNS_TOPIC_ARN="+arn, "RELAY_SINK=sns"), func() map[string]int {
			got := map[string]int{}
			for _, m := range srv.Received(t, u) {
				if v, ok := m.MessageAttributes[snssink.IdempotencyKeyAttribute]; ok && v.StringValue != nil {
					got[*v.StringValue]++
				}
			}
			return got
		}
	}},
}

func TestProcess_HostileRowsStopNothing(t *testing.T) {
	t.Parallel()
	for _, s := range hostileSinks {
		modes := []string{"unordered"}
		if s.name == "nats" {
			modes = append(modes, "ordered", "partitioned")
		}
		for _, mode := range modes {
			t.Run(s.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				testHostileRowsStopNothing(t, s, mode)
			})
		}
	}
}

// farFuture is the idempotency key of the hostile rows' row due at the
// latest finite time PostgreSQL has.
const farFuture = "ordinary-due-294276-ad"

func testHostileRowsStopNothing(t *testing.T, s hostileSink, mode string) {
	db := dbtest.New(t)
	env, arrived := s.start(t, db)

	// Each hostile row between two ordinary rows of its key (one of ten;
	// a hostile key has its own), all in one transaction.
	var args [][]any
	var ordinary []string
	hostile := map[string]sinktest.Hostile{}
	for i, h := range sinktest.HostileRows() {
		k := fmt.Sprintf("k-%d", i%10)
		for _, side := range []string{"before", "after"} {
			key := fmt.Sprintf("ordinary-%d-%s", i, side)
			ordinary = append(ordinary, key)
			args = append(args, []any{sinktest.Topic, []byte(`{"ordinary": true}`), k, nil, key})
			if side == "before" {
				m := sinks.Message{}
				m.Topic, m.Payload, m.Key, m.IdempotencyKey = sinktest.Topic, []byte("hostile"), k, fmt.Sprintf("hostile-%d", i)
				h.Set(&m)
				var headers any
				if m.Headers != nil {
					b, err := json.Marshal(m.Headers)
					if err != nil {
						t.Fatal(err)
					}
					headers = string(b)
				}
				var key any = m.Key
				if m.Key == "" {
					key = nil
				}
				args = append(args, []any{m.Topic, m.Payload, key, headers, m.IdempotencyKey})
				hostile[m.IdempotencyKey] = h
			}
		}
	}
	// available_at at its edges: the earliest time PostgreSQL has is due
	// (delivered, whatever the claim floor makes of it), the latest finite
	// one is not due for eight thousand years (it waits, holding nothing
	// up); infinity is refused at insert.
	for i := range args {
		args[i] = append(args[i], nil)
	}
	args = append(args,
		[]any{sinktest.Topic, []byte(`{"due": "4713 BC"}`), "k-0", nil, "ordinary-due-4713-bc", "4713-01-01 00:00:00+00 BC"},
		[]any{sinktest.Topic, []byte(`{"due": "294276 AD"}`), "k-far-future", nil, farFuture, "294276-12-31 00:00:00+00"})
	ordinary = append(ordinary, "ordinary-due-4713-bc")
	stored := db.ExecEachAsRelay(t, `INSERT INTO %s.messages (topic, payload, key, headers, idempotency_key, available_at)
	  VALUES ($1, $2, $3, $4::jsonb, $5, coalesce($6::timestamptz, now()))`, args)
	kept := 0
	for i, ok := range stored {
		key := args[i][4].(string)
		if _, isHostile := hostile[key]; isHostile && !ok {
			delete(hostile, key) // PostgreSQL itself refuses it: no table holds it
		} else if !ok {
			t.Fatalf("an ordinary row was refused: %v", args[i])
		} else if isHostile {
			kept++
		}
	}
	t.Logf("%d hostile rows stored, %d refused by PostgreSQL itself", kept, len(sinktest.HostileRows())-kept)

	p := startProcess(t, append(env, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "RELAY_MODE="+mode,
		"RELAY_MAX_ATTEMPTS=3", "RELAY_BACKOFF_MIN=50ms", "RELAY_BACKOFF_MAX=200ms")...)
	waitfor.Condition(t, 120*time.Second, "every due row delivered or dead-lettered", func() bool {
		return db.CountWhere(t, "messages_all", "idempotency_key <> '"+farFuture+"'") == 0
	})
	if db.CountWhere(t, "messages_all", "idempotency_key = '"+farFuture+"'") != 1 {
		t.Errorf("the row due in 294276 AD left the hot table")
	}

	delivered := relaytest.Archive(t, db, "true")
	dead := map[string][2]string{}
	rows, err := db.Pool.Query(context.Background(), "SELECT idempotency_key, reason, error, attempts FROM "+db.Table("dead_letters"))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, reason, msg string
		var attempts int
		if err := rows.Scan(&key, &reason, &msg, &attempts); err != nil {
			t.Fatal(err)
		}
		dead[key] = [2]string{reason, fmt.Sprintf("%d attempts: %s", attempts, msg)}
		if h, ok := hostile[key]; !ok {
			t.Errorf("ordinary row %s was dead-lettered: %s %s", key, reason, msg)
		} else if h.Part != "topic" && (reason != "permanent" || attempts != 1) {
			t.Errorf("hostile row %s was dead-lettered as %s after %d attempts, want permanent at once: %s", h.Name, reason, attempts, msg)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for key, h := range hostile {
		_, ok := delivered[key]
		if _, isDead := dead[key]; ok == isDead {
			t.Errorf("hostile row %s is delivered %v and dead-lettered %v: want exactly one", h.Name, ok, isDead)
		}
	}
	got := arrived()
	t.Logf("%d rows delivered, %d dead-lettered, %d messages arrived", len(delivered), len(dead), len(got))
	for _, key := range ordinary {
		if _, ok := delivered[key]; !ok {
			t.Errorf("ordinary row %s was not delivered", key)
		}
	}
	missing := slices.DeleteFunc(slices.Clone(ordinary), func(k string) bool { return got[k] > 0 })
	if len(missing) > 0 {
		t.Errorf("%d ordinary rows did not arrive (first %s)", len(missing), missing[0])
	}
	for _, line := range p.log() {
		if strings.Contains(line, s.lost) {
			t.Errorf("a broker connection was lost: %.300s", line)
			break
		}
	}
}

// TestProcess_ARowLargerThanTheBudgetIsDeadLetteredUnread: a 200 MiB row
// crash-looped a relay under a 256 MiB memory limit (it was read whole
// before any limit was checked, at every start, and its attempts never
// grew). The claim reads its size first: it is dead-lettered as permanent,
// naming RELAY_MAX_IN_FLIGHT_BYTES, without the relay reading it, and the
// relay's peak resident memory stays far below the row.
func TestProcess_ARowLargerThanTheBudgetIsDeadLetteredUnread(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.big', convert_to(repeat('x', 200 << 20), 'UTF8'), 'too-big')`)
	relaytest.InsertRows(t, db, 50, "events.small")
	p := startProcess(t, relayEnv(db, srv)...)
	wantPermanent(t, db, "too-big", "payload of 209715200 bytes exceeds RELAY_MAX_IN_FLIGHT_BYTES of 67108864 bytes")
	relaytest.WaitDrained(t, db, 30*time.Second)
	if n := srv.Count(t, "EVENTS"); n != 50 {
		t.Errorf("the stream holds %d messages, want the 50 small rows", n)
	}
	peak := peakRSS(t, p)
	t.Logf("peak RSS %d MiB", peak>>20)
	if peak > 100<<20 {
		t.Errorf("the relay's peak resident memory was %d MiB: it read the 200 MiB row", peak>>20)
	}
}

// peakRSS returns the most resident memory p has used so far (VmHWM).
func peakRSS(t *testing.T, p *process) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// TestProcess_ARowThatClosesTheNATSConnectionIsDeadLetteredAlone: a
// server that closes the connection over a row (here a max_control_line
// lowered below the relay's subject limit) made nats.go give up on the
// connection for good, and the relay delivered nothing more until
// restarted, with /livez green. The sink makes a new client, sends the
// batch's messages again one at a time, and refuses the one that closes
// the connection alone: it is dead-lettered as permanent on its first
// attempt, with the server's reason, and the others are delivered once.
func TestProcess_ARowThatClosesTheNATSConnectionIsDeadLetteredAlone(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t, func(o *server.Options) { o.MaxControlLine = 256 })
	srv.CreateStream(t, "EVENTS", "events.>")
	relaytest.InsertRows(t, db, 20, "events.before")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.' || repeat('x', 240), 'x', 'line-breaker')`)
	relaytest.InsertRows(t, db, 20, "events.after")
	p := startProcess(t, relayEnv(db, srv, "RELAY_MAX_ATTEMPTS=3", "RELAY_BACKOFF_MIN=50ms", "RELAY_BACKOFF_MAX=200ms")...)
	wantPermanent(t, db, "line-breaker", "closed the connection when this message was published alone", "maximum control line exceeded")
	relaytest.WaitDrained(t, db, 60*time.Second)
	relaytest.AssertStreamMatchesArchive(t, db, srv, "EVENTS", 40)
	if !logHas(p, "made a new NATS client to replace the closed one") {
		t.Error("the log does not say the sink replaced its client")
	}
}

// TestProcess_RelaysWithAnotherDefaultSinkAreRefused: two relays on one
// schema, one sending the rows without a destination to RabbitMQ, the
// other (serving it through RELAY_SCHEMA_MATCH) to NATS, split the rows
// between the brokers and archived them all as delivered. Relays record
// their sinks: the second refuses to start, naming RELAY_SINK and the
// other relay, and delivers nothing.
func TestProcess_RelaysWithAnotherDefaultSinkAreRefused(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	v := rabbitmqtest.New(t)
	v.BindQueue(t, "orders", "amq.topic", "orders.#", nil)
	srv := natstest.Start(t)
	srv.CreateStream(t, "ORDERS", "orders.>")
	first := startProcess(t, rabbitmqEnvFor(db, v, "RELAY_ID=to-rabbitmq")...)
	first.waitLog(`"relay started"`)

	second := startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "NATS_URL="+srv.URL(), "RELAY_ID=to-nats")
	if code := second.wait(30 * time.Second); code != exitUsage {
		t.Fatalf("a relay with another default sink exited %d, want %d", code, exitUsage)
	}
	log := strings.Join(second.log(), "\n")
	for _, want := range []string{"RELAY_SINK", "to-rabbitmq (default sink rabbitmq)", "must have the same default sink"} {
		if !strings.Contains(log, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, log)
		}
	}

	// Served through a pattern, the outbox is refused the same way and
	// retried; the rows all go to RabbitMQ.
	matching := startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA_MATCH="+db.Name, "NATS_URL="+srv.URL(), "RELAY_ID=to-nats-by-pattern")
	matching.waitLog("must have the same default sink")
	relaytest.InsertRows(t, db, 50, "orders.created")
	relaytest.WaitDrained(t, db, 30*time.Second)
	if got := v.WaitTake(t, "orders", 50, 30*time.Second); len(got) != 50 {
		t.Errorf("RabbitMQ received %d of the 50 rows", len(got))
	}
	if n := srv.Count(t, "ORDERS"); n != 0 {
		t.Errorf("NATS received %d rows meant for RabbitMQ", n)
	}
	if !first.running() {
		t.Error("the first relay stopped")
	}
}

// TestProcess_MaxPayloadBytesRefusesLargePayloadsAtInsert: with
// RELAY_MAX_PAYLOAD_BYTES the migrations bound the payload of new rows, so
// a producer learns it from its own insert (the error gives the limit), a larger payload written before is dead-lettered unread naming
// the setting, and `migrate` moves the bound.
func TestProcess_MaxPayloadBytesRefusesLargePayloadsAtInsert(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.a', convert_to(repeat('x', 2000), 'UTF8'), 'before-the-limit')`)
	p := startProcess(t, relayEnv(db, srv, "RELAY_MAX_PAYLOAD_BYTES=1024")...)
	p.waitLog(`"relay started"`)
	wantPermanent(t, db, "before-the-limit", "payload of 2000 bytes exceeds RELAY_MAX_PAYLOAD_BYTES of 1024 bytes")

	insert := func(size int) error {
		_, err := db.Pool.Exec(context.Background(), "INSERT INTO "+db.Table("messages")+" (topic, payload) VALUES ('events.a', convert_to(repeat('y', $1), 'UTF8'))", size)
		return err
	}
	if err := insert(1025); err == nil || !strings.Contains(err.Error(), "payload must be at most 1024 bytes (RELAY_MAX_PAYLOAD_BYTES), not 1025") {
		t.Errorf("a 1025-byte payload: %v, want the insert refused naming the limit", err)
	}
	if err := insert(1024); err != nil {
		t.Errorf("a 1024-byte payload: %v", err)
	}
	relaytest.WaitDrained(t, db, 30*time.Second)
	if n := srv.Count(t, "EVENTS"); n != 1 {
		t.Errorf("the stream holds %d messages, want the 1024-byte one", n)
	}

	env := []string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name, "RELAY_MAX_PAYLOAD_BYTES=4096"}
	if code, stdout, stderr, _ := runBinaryWithin(t, 30*time.Second, env, "migrate"); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := insert(4000); err != nil {
		t.Errorf("a 4000-byte payload after migrate moved the bound to 4096: %v", err)
	}
	if err := insert(4097); err == nil || !strings.Contains(err.Error(), "payload must be at most 4096 bytes") {
		t.Errorf("a 4097-byte payload: %v, want the insert refused naming the limit", err)
	}
	_, stdout, _, _ := runBinaryWithin(t, 10*time.Second, env, "migrate", "--print")
	if !strings.Contains(stdout, "IF octet_length(NEW.payload) > 4096 THEN") || !strings.Contains(stdout, "CREATE TRIGGER messages_payload_limit") {
		t.Errorf("migrate --print does not print the payload bound:\n%.2000s", stdout[max(0, len(stdout)-2000):])
	}
}
