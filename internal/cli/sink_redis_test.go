package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/redistest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/tlstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

func TestRun_RefusesBadRedisConfiguration(t *testing.T) {
	t.Parallel()
	const url = "REDIS_URL=redis://relay:hunter2@redis:6379/0"
	const plain = "REDIS_URL=redis://redis:6379/0"
	const tlsURL = "REDIS_URL=rediss://redis:6380/0"
	cases := []struct {
		env  []string
		want []string
	}{
		{[]string{"REDIS_URL=http://relay:hunter2@redis:6379/"}, []string{"REDIS_URL", `unsupported scheme "http"`, "not shown"}},
		{[]string{"REDIS_URL=redis://relay:hunter2@redis:port/"}, []string{"REDIS_URL", "not shown"}},
		{[]string{"REDIS_URL=redis://relay:hunter2@redis:6379/0?pool_size=3"}, []string{"REDIS_URL", "query parameters"}},
		{[]string{"REDIS_URL=redis:///0"}, []string{"REDIS_URL", "host"}},
		{[]string{url, "REDIS_PASSWORD=hunter2", "RELAY_SINK=nats"}, []string{"REDIS_PASSWORD", "set one of them"}},
		{[]string{plain, "REDIS_USERNAME=relay", "RELAY_SINK=nats"}, []string{"REDIS_USERNAME", "without a password"}},
		{[]string{plain, "REDIS_STREAM_PREFIX=a\tb", "RELAY_SINK=nats"}, []string{"REDIS_STREAM_PREFIX", "not printable"}},
		{[]string{plain, "REDIS_MAXLEN=-1", "RELAY_SINK=nats"}, []string{`REDIS_MAXLEN="-1"`, "negative"}},
		{[]string{plain, "REDIS_TIMEOUT=500ms", "RELAY_SINK=nats"}, []string{`REDIS_TIMEOUT="500ms"`, "shorter than a second"}},
		{[]string{plain, "REDIS_TIMEOUT=19s", "RELAY_SINK=nats"}, []string{`RELAY_LEASE="30s"`, "REDIS_TIMEOUT=19s"}},
		{[]string{plain, "REDIS_MAX_MESSAGE_BYTES=100", "RELAY_SINK=nats"}, []string{`REDIS_MAX_MESSAGE_BYTES="100"`, "out of range"}},
		{[]string{plain, "REDIS_TLS_CA_FILE=/ca.pem", "RELAY_SINK=nats"}, []string{"REDIS_TLS_CA_FILE", "rediss://"}},
		{[]string{"REDIS_TLS_CA_FILE=/ca.pem"}, []string{"REDIS_TLS_CA_FILE", "rediss://"}},
		{[]string{tlsURL, "REDIS_TLS_CA_FILE=/nonexistent/ca.pem", "RELAY_SINK=nats"}, []string{"REDIS_TLS_CA_FILE", "read the CA file"}},
		{[]string{tlsURL, "REDIS_TLS_CERT_FILE=/cert.pem", "RELAY_SINK=nats"}, []string{"REDIS_TLS_CERT_FILE", "REDIS_TLS_KEY_FILE is not set"}},
		{[]string{url}, []string{"RELAY_SINK", "nats or redis"}},
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

// redisEnvFor is the environment of a relay delivering db's rows to srv
// only, under the stream prefix events:.
func redisEnvFor(db *dbtest.Schema, srv *redistest.Server, extra ...string) []string {
	return append([]string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name, "REDIS_URL=" + srv.URL(),
		"REDIS_STREAM_PREFIX=events:", "RELAY_SINK=redis"}, extra...)
}

// redisArrived returns, by idempotency key, the entries of every stream of
// srv.
func redisArrived(t *testing.T, srv *redistest.Server) map[string][]redistest.Entry {
	t.Helper()
	got := map[string][]redistest.Entry{}
	for _, e := range srv.AllEntries(t) {
		id, _ := e.Field("idempotency_key")
		got[id] = append(got[id], e)
	}
	return got
}

// TestProcess_RedisDeliversRowsOnceByteForByte runs the binary as a
// least-privileged ACL user whose password comes from REDIS_PASSWORD_FILE:
// rows written with plain SQL arrive once each, in the stream of their
// topic under REDIS_STREAM_PREFIX, byte for byte, with their key, headers
// and idempotency key; the password is never logged.
func TestProcess_RedisDeliversRowsOnceByteForByte(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := redistest.Start(t)
	srv.AddUser(t, "relay", "relay-s3cret", "~events:*", "+xadd", "+ping", "+info")
	secret := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(secret, []byte("relay-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, redisEnvFor(db, srv, "REDIS_USERNAME=relay", "REDIS_PASSWORD_FILE="+secret, "REDIS_MAXLEN=100000")...)
	p.waitLog("connected to Redis")

	const bulk = 500
	relaytest.InsertRows(t, db, bulk, "orders.bulk")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, headers, idempotency_key) VALUES
	  ('orders.created', convert_to('{"order_id": 42}', 'UTF8'), 'order-42', '{"content-type": "application/json", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}', 'order-42-created'),
	  ('orders.paid', '\x00ff0d0a'::bytea, NULL, NULL, 'order-42-paid'),
	  ('orders.empty', '', NULL, NULL, 'order-42-empty')`)
	relaytest.WaitDrained(t, db, relaytest.Budget(bulk))

	archived := relaytest.Archive(t, db, "true")
	if len(archived) != bulk+3 {
		t.Fatalf("archive holds %d delivered rows, want %d", len(archived), bulk+3)
	}
	got := redisArrived(t, srv)
	if len(got) != bulk+3 {
		t.Errorf("Redis holds %d idempotency keys, want %d", len(got), bulk+3)
	}
	for key, row := range archived {
		entries := got[key]
		if len(entries) != 1 {
			t.Fatalf("row %s arrived %d times, want once", key, len(entries))
		}
		e := entries[0]
		if payload, _ := e.Field("payload"); payload != string(row.Payload) {
			t.Fatalf("entry %s: payload %q, want %q", key, payload, row.Payload)
		}
		topic, _ := e.Field("topic")
		if e.Stream != "events:"+topic {
			t.Errorf("entry %s is in stream %q, with topic %q", key, e.Stream, topic)
		}
		for k, v := range row.Headers {
			if got, _ := e.Field("header:" + k); got != v {
				t.Errorf("entry %s: header %s = %q, want %q", key, k, got, v)
			}
		}
	}
	if k, _ := got["order-42-created"][0].Field("key"); k != "order-42" {
		t.Errorf("key field %q, want order-42", k)
	}
	if strings.Contains(strings.Join(p.log(), "\n"), "relay-s3cret") {
		t.Error("the log shows the password")
	}
}

// TestProcess_RedisKeepsKeyOrderAcrossTwoRelaysAndASIGKILL: two relays
// append a thousand keys' events in ordered and partitioned modes; one is
// killed mid-way and replaced; each key's entries are in insert order.
func TestProcess_RedisKeepsKeyOrderAcrossTwoRelaysAndASIGKILL(t *testing.T) {
	t.Parallel()
	inKeyOrderModes(t, func(t *testing.T, mode string) {
		dbtest.Exclusive(t, "many relays, many events")
		db := dbtest.New(t)
		srv := redistest.Start(t)
		const keys, perKey = 1000, 20
		insertOrdered(t, db, keys, perKey)
		env := redisEnvFor(db, srv, mode, "RELAY_LEASE=5s", "REDIS_TIMEOUT=2s")
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

		var accepted []orderedEvent
		for _, e := range srv.Entries(t, "events:events.ordered") {
			payload, _ := e.Field("payload")
			var ev orderedEvent
			if err := json.Unmarshal([]byte(payload), &ev); err != nil {
				t.Fatalf("entry %s: %v", e.ID, err)
			}
			accepted = append(accepted, ev)
		}
		assertInOrder(t, accepted, keys, perKey)
	})
}

// TestProcess_RedisOutageRowsWaitAndReadyzSaysWhy: while Redis is down the
// relay claims nothing for it, so rows wait without spending attempts, and
// /readyz answers 503 saying Redis does not answer; when it is back, every
// row arrives and nothing is lost.
func TestProcess_RedisOutageRowsWaitAndReadyzSaysWhy(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := redistest.Start(t)
	p := startProcess(t, redisEnvFor(db, srv, "RELAY_BACKOFF_MIN=100ms", "RELAY_BACKOFF_MAX=500ms", "RELAY_MAX_ATTEMPTS=3")...)
	relaytest.InsertRows(t, db, 100, "orders.before")
	relaytest.WaitDrained(t, db, 30*time.Second)

	srv.Stop(t)
	waitfor.Condition(t, 20*time.Second, "/readyz to say Redis does not answer", func() bool {
		code, body := p.readyz()
		return code == 503 && strings.Contains(body, "redis") && strings.Contains(body, "Redis does not answer")
	})
	relaytest.InsertRows(t, db, 200, "orders.during")
	// Long enough for several claims and backoffs, had the relay tried.
	time.Sleep(2 * time.Second)
	if n := db.CountWhere(t, "messages_all", "attempts > 0"); n != 0 {
		t.Errorf("%d rows spent attempts while Redis was down", n)
	}
	if n := db.Count(t, "dead_letters"); n != 0 {
		t.Errorf("%d rows were dead-lettered during the outage", n)
	}

	srv.Start(t)
	relaytest.WaitDrained(t, db, 60*time.Second)
	waitfor.Condition(t, 20*time.Second, "/readyz to answer 200", func() bool {
		code, _ := p.readyz()
		return code == 200
	})
	archived := relaytest.Archive(t, db, "true")
	got := redisArrived(t, srv)
	if len(archived) != 300 {
		t.Errorf("archive holds %d delivered rows, want 300", len(archived))
	}
	for key := range archived {
		if len(got[key]) == 0 {
			t.Errorf("row %s was archived as delivered but is not in Redis", key)
		}
	}
}

// TestProcess_RedisOversizeRowIsDeadLetteredAlone: an entry over
// REDIS_MAX_MESSAGE_BYTES is dead-lettered without being sent, at once,
// naming the limit; the rows beside it arrive.
func TestProcess_RedisOversizeRowIsDeadLetteredAlone(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := redistest.Start(t)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES
	  ('orders.created', 'small', 'small-1'),
	  ('orders.created', convert_to(repeat('x', 65537), 'UTF8'), 'too-large-1'),
	  ('orders.created', convert_to(repeat('x', 60000), 'UTF8'), 'just-fits-1')`)
	startProcess(t, redisEnvFor(db, srv, "REDIS_MAX_MESSAGE_BYTES=65536")...)
	wantPermanent(t, db, "too-large-1", "REDIS_MAX_MESSAGE_BYTES", "65536")
	relaytest.WaitDrained(t, db, 30*time.Second)
	got := redisArrived(t, srv)
	if len(got["small-1"]) != 1 || len(got["just-fits-1"]) != 1 || len(got["too-large-1"]) != 0 {
		t.Errorf("Redis holds small-1 %d times, just-fits-1 %d times, too-large-1 %d times; want 1, 1, 0",
			len(got["small-1"]), len(got["just-fits-1"]), len(got["too-large-1"]))
	}
}

// TestProcess_RedisOverTLSAndRefusedCredentials: with rediss:// and the
// REDIS_TLS_* files rows arrive; with a wrong password nothing does, the
// start-up check reports auth_failed, and /readyz says why.
func TestProcess_RedisOverTLSAndRefusedCredentials(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	server, client := ca.Issue(t, "127.0.0.1"), ca.Issue(t)
	srv := redistest.Start(t, redistest.Options{TLS: &redistest.TLS{CertFile: server.CertFile, KeyFile: server.KeyFile, CAFile: ca.CertFile, RequireClientCert: true}})
	srv.AddUser(t, "relay", "relay-s3cret", "~events:*", "+xadd", "+ping")

	db := dbtest.New(t)
	startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "REDIS_URL="+srv.TLSURL(), "REDIS_STREAM_PREFIX=events:",
		"REDIS_USERNAME=relay", "REDIS_PASSWORD=relay-s3cret",
		"REDIS_TLS_CA_FILE="+ca.CertFile, "REDIS_TLS_CERT_FILE="+client.CertFile, "REDIS_TLS_KEY_FILE="+client.KeyFile)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('orders.created', 'over TLS', 'tls-1')`)
	relaytest.WaitDrained(t, db, 30*time.Second)
	if got := redisArrived(t, srv)["tls-1"]; len(got) != 1 || got[0].Stream != "events:orders.created" {
		t.Errorf("the row arrived as %v, want once in events:orders.created", got)
	}

	refused := dbtest.New(t)
	p := startProcess(t, "DATABASE_URL="+refused.URL, "RELAY_SCHEMA="+refused.Name, "REDIS_URL="+srv.TLSURL(), "REDIS_STREAM_PREFIX=events:",
		"REDIS_USERNAME=relay", "REDIS_PASSWORD=wrong-password",
		"REDIS_TLS_CA_FILE="+ca.CertFile, "REDIS_TLS_CERT_FILE="+client.CertFile, "REDIS_TLS_KEY_FILE="+client.KeyFile)
	refused.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('orders.created', 'refused', 'refused-1')`)
	waitfor.Condition(t, 30*time.Second, "the auth_failed problem in /metrics", func() bool {
		return strings.Contains(p.metrics(), `outbox_relay_sink_problem{problem="auth_failed",sink="redis"} 1`)
	})
	waitfor.Condition(t, 30*time.Second, "/readyz to say the credentials are refused", func() bool {
		code, body := p.readyz()
		return code == 503 && strings.Contains(body, "refused the credentials")
	})
	time.Sleep(time.Second) // more probes, which must not log again
	if n := len(p.logLines("ERROR", "Redis refuses")); n != 1 {
		t.Errorf("the refusal is logged %d times at error level, want once", n)
	}
	if refused.CountWhere(t, "messages_all", "attempts > 0") != 0 {
		t.Error("the row spent attempts while the credentials were refused")
	}
	if strings.Contains(strings.Join(p.log(), "\n"), "wrong-password") {
		t.Error("the log shows the password")
	}
}
