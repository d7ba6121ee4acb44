package cli

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// docs/guarantees.md's promise for RELAY_ORDERED, kept by real relay processes:
// per key, the events a destination accepts are the key's events in insert
// order. A re-send of an event already accepted is allowed (delivery is at
// least once); a gap or a reordering is not.

// keyOrderModes are the settings of the modes that keep each key's order;
// the ordering tests run in each, with the same rows and the same checks.
var keyOrderModes = map[string]string{
	"ordered":     "RELAY_ORDERED=true",
	"partitioned": "RELAY_MODE=partitioned",
}

// inKeyOrderModes runs test once per mode of keyOrderModes, in parallel
// subtests, passing the mode's setting.
func inKeyOrderModes(t *testing.T, test func(t *testing.T, mode string)) {
	for name, mode := range keyOrderModes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, mode)
		})
	}
}

// orderedEvent is the payload of the ordered tests' rows.
type orderedEvent struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// insertOrdered writes keys × perKey events, interleaved across keys, with
// payloads {"key": …, "seq": n} and idempotency keys key-n; every tenth row
// has no key when unkeyed is set.
func insertOrdered(t *testing.T, db *dbtest.Schema, keys, perKey int) {
	t.Helper()
	db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, idempotency_key)
SELECT 'events.ordered', convert_to(json_build_object('key', 'k' || k, 'seq', s)::text, 'UTF8'), 'k' || k, 'k' || k || '-' || s
  FROM generate_series(1, $2) AS s, generate_series(1, $1) AS k
 ORDER BY s, k`, keys, perKey)
}

// assertInOrder checks each key's accepted events: with re-sends of
// accepted events dropped, exactly 1..perKey.
func assertInOrder(t *testing.T, accepted []orderedEvent, keys, perKey int) {
	t.Helper()
	byKey := map[string][]int{}
	seen := map[orderedEvent]bool{}
	for _, e := range accepted {
		if seen[e] {
			continue // a re-send of an accepted event
		}
		seen[e] = true
		byKey[e.Key] = append(byKey[e.Key], e.Seq)
	}
	if len(byKey) != keys {
		t.Errorf("events of %d keys accepted, want %d", len(byKey), keys)
	}
	bad := 0
	for key, seqs := range byKey {
		want := make([]int, perKey)
		for i := range want {
			want[i] = i + 1
		}
		if !slices.Equal(seqs, want) {
			if bad++; bad <= 5 {
				t.Errorf("key %s: accepted %v, want 1..%d in order", key, seqs, perKey)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... and %d more keys out of order", bad-5)
	}
}

func TestProcess_OrderedThreeRelaysAFlakyWebhookKeepEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	inKeyOrderModes(t, func(t *testing.T, mode string) {
		dbtest.Exclusive(t, "many relays, many events")
		db := dbtest.New(t)
		rcv := webhooktest.NewReceiver(t)
		// About one first attempt in ten fails: most with 500, some with 429
		// and Retry-After: 1, which must hold up that key only.
		rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
			id := r.Header.Get("webhook-id")
			h := fnv.New32a()
			h.Write([]byte(id))
			if rcv.Arrived(id) > 1 {
				return 0 // retries succeed
			}
			switch h.Sum32() % 100 {
			case 0, 1, 2:
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return http.StatusTooManyRequests
			case 3, 4, 5, 6, 7, 8, 9:
				w.WriteHeader(http.StatusInternalServerError)
				return http.StatusInternalServerError
			}
			return 0
		})
		const keys, perKey = 1000, 50
		insertOrdered(t, db, keys, perKey)
		env := []string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name, "WEBHOOK_URL=" + rcv.URL, "WEBHOOK_SECRET=" + rcv.Secret,
			mode, "RELAY_BACKOFF_MIN=50ms", "RELAY_BACKOFF_MAX=500ms"}
		for range 3 {
			startProcess(t, env...)
		}
		relaytest.WaitDrained(t, db, relaytest.Budget(keys*perKey))

		var accepted []orderedEvent
		retried := 0
		for _, req := range rcv.Requests() {
			if req.Status != http.StatusNoContent {
				retried++
				continue
			}
			var e orderedEvent
			if err := json.Unmarshal(req.Body, &e); err != nil {
				t.Fatalf("payload %q: %v", req.Body, err)
			}
			accepted = append(accepted, e)
		}
		if retried < keys*perKey/20 {
			t.Fatalf("only %d requests failed; the test proves little", retried)
		}
		assertInOrder(t, accepted, keys, perKey)
		if n := db.Count(t, "dead_letters"); n != 0 {
			t.Errorf("%d rows were dead-lettered", n)
		}
		if n := db.CountWhere(t, "messages_all", "waiting"); n != 0 {
			t.Errorf("%d rows are left waiting on their key in an empty table", n)
		}
	})
}

func TestProcess_OrderedToJetStreamSurvivesASIGKILL(t *testing.T) {
	t.Parallel()
	inKeyOrderModes(t, func(t *testing.T, mode string) {
		dbtest.Exclusive(t, "many relays, many events")
		db := dbtest.New(t)
		srv := natstest.Start(t)
		srv.CreateStream(t, "EVENTS", "events.>")
		const keys, perKey = 1000, 50
		insertOrdered(t, db, keys, perKey)
		// An ack timeout of 1s made a loaded machine (the whole suite under
		// the race detector) time out acks, retry and load it further, past
		// the test's budget; 2s keeps the rescue after the kill quick.
		env := relayEnv(db, srv, mode, "RELAY_LEASE=5s", "NATS_ACK_TIMEOUT=2s")
		victim := startProcess(t, env...)
		startProcess(t, env...)
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
		for _, m := range srv.Messages(t, "EVENTS") {
			var e orderedEvent
			if err := json.Unmarshal(m.Data, &e); err != nil {
				t.Fatalf("message %s: %v", m.Header.Get(nats.MsgIdHdr), err)
			}
			accepted = append(accepted, e)
		}
		assertInOrder(t, accepted, keys, perKey)
	})
}

func TestProcess_OrderedRowsWithoutAKeyAreNeverHeldUp(t *testing.T) {
	t.Parallel()
	inKeyOrderModes(t, func(t *testing.T, mode string) {
		db := dbtest.New(t)
		rcv := webhooktest.NewReceiver(t)
		// Every keyed event fails and waits an hour for its retry: the keys
		// block.
		rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
			if strings.HasPrefix(r.Header.Get("webhook-id"), "k") {
				w.WriteHeader(http.StatusServiceUnavailable)
				return http.StatusServiceUnavailable
			}
			return 0
		})
		startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "WEBHOOK_URL="+rcv.URL, "WEBHOOK_SECRET="+rcv.Secret,
			mode, "RELAY_BACKOFF_MIN=1h", "RELAY_BACKOFF_MAX=1h")
		insertOrdered(t, db, 50, 20)
		db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key)
		            SELECT 'events.free', 'x', 'free-' || i FROM generate_series(1, 500) AS i`)
		waitfor.Condition(t, 60*time.Second, "every row without a key to be delivered", func() bool {
			var n int
			_ = db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Table("archive")+" WHERE key IS NULL").Scan(&n)
			return n == 500
		})
		var keyedLeft int
		if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Table("messages_all")+" WHERE key IS NOT NULL").Scan(&keyedLeft); err != nil {
			t.Fatal(err)
		}
		if keyedLeft != 50*20 {
			t.Errorf("%d keyed rows left, want all 1000 held up behind their failing heads", keyedLeft)
		}
	})
}

func TestProcess_AFleetOfMixedModesIsRefused(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	ordered := startProcess(t, relayEnv(db, srv, "RELAY_ORDERED=true")...)
	ordered.waitLog(`"relay started"`)
	unordered := startProcess(t, relayEnv(db, srv, "RELAY_ORDERED=false")...)
	if code := unordered.wait(30 * time.Second); code != exitUsage {
		t.Fatalf("an unordered relay beside an ordered one exited %d, want %d", code, exitUsage)
	}
	log := strings.Join(unordered.log(), "\n")
	for _, want := range []string{"RELAY_ORDERED", "every relay on a schema must run the same mode", "(ordered)"} {
		if !strings.Contains(log, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, log)
		}
	}
	if !ordered.running() {
		t.Error("the ordered relay stopped")
	}
}
