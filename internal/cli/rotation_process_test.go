package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// TestProcess_TheHotTableRotatesUnderEveryGuarantee runs three relays of
// the binary in each mode with RELAY_HOT_ROTATION=1s while keyed rows flow
// in waves to a webhook that fails about one first attempt in ten, so that
// generations rotate, drain and are emptied with rows in flight, in
// backoff and delayed, and rows are carried forward. One relay is killed
// with SIGKILL halfway and another joins. Every row is delivered and
// archived once (per-key order in ordered and partitioned mode), delayed
// rows not before their time, a producer's key inserted again after
// delivery is archived as a duplicate, a row that always fails is
// dead-lettered, rows cancelled by key while delayed are cancelled, and
// the hot table's generations rotated and were emptied.
func TestProcess_TheHotTableRotatesUnderEveryGuarantee(t *testing.T) {
	t.Parallel()
	modes := map[string]string{"unordered": "RELAY_MODE=unordered", "ordered": "RELAY_ORDERED=true", "partitioned": "RELAY_MODE=partitioned"}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dbtest.Exclusive(t, "many relays, many events")
			testRotationUnderGuarantees(t, name, mode)
		})
	}
}

func testRotationUnderGuarantees(t *testing.T, name, mode string) {
	ctx := context.Background()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		id := r.Header.Get("webhook-id")
		if id == "poison" {
			w.WriteHeader(http.StatusInternalServerError)
			return http.StatusInternalServerError
		}
		h := fnv.New32a()
		h.Write([]byte(id))
		if rcv.Arrived(id) == 1 && h.Sum32()%10 == 0 {
			w.WriteHeader(http.StatusInternalServerError)
			return http.StatusInternalServerError
		}
		return 0
	})
	env := []string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name, "WEBHOOK_URL=" + rcv.URL, "WEBHOOK_SECRET=" + rcv.Secret,
		mode, "RELAY_HOT_ROTATION=1s", "RELAY_LEASE=5s", "WEBHOOK_TIMEOUT=1500ms",
		"RELAY_BACKOFF_MIN=200ms", "RELAY_BACKOFF_MAX=1s", "RELAY_MAX_ATTEMPTS=4"}
	relays := []*process{startProcess(t, env...), startProcess(t, env...), startProcess(t, env...)}

	// Delayed rows, a row that always fails, and rows to cancel while
	// they wait: each outlives several generations.
	var delayedAt time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT now() + interval '4 seconds'").Scan(&delayedAt); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key, available_at)
	            SELECT 'events.delayed', convert_to(json_build_object('key', 'delayed', 'seq', i)::text, 'UTF8'),
	                   'delayed', 'delayed-' || i, $1
	              FROM generate_series(1, 20) AS i`, delayedAt)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key) VALUES ('events.poison', 'x', 'poison', 'poison')`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key, available_at)
	            SELECT 'events.cancel', 'x', 'cancel-me', 'cancel-' || i, now() + interval '1 hour' FROM generate_series(1, 5) AS i`)

	const keys, perKey, waves = 200, 40, 8
	for w := range waves {
		db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, idempotency_key)
SELECT 'events.ordered', convert_to(json_build_object('key', 'k' || k, 'seq', s)::text, 'UTF8'), 'k' || k, 'k' || k || '-' || s
  FROM generate_series($1::int, $2::int) AS s, generate_series(1, $3::int) AS k
 ORDER BY s, k`, w*perKey/waves+1, (w+1)*perKey/waves, keys)
		if w == waves/2 {
			if err := relays[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			relays[0].wait(10 * time.Second)
			relays[0] = startProcess(t, env...)
		}
		time.Sleep(time.Second)
	}
	// The delayed rows to cancel were inserted into slot 1's table; with
	// generation 4 current, slot 1 was emptied at least once (a rotation
	// needs a spare), so they were carried, and are still pending. The
	// rotations go on after the inserts: on two busy cores, with a round
	// given up whenever a lock is not had within 50 ms, the eight seconds
	// of inserts saw three generations once in about ten runs of CI.
	var generation int64
	currentGeneration := func() int64 {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, "SELECT max(generation) FROM "+db.Table("message_generations")).Scan(&generation); err != nil {
			t.Fatal(err)
		}
		return generation
	}
	waitfor.Condition(t, 30*time.Second, "the hot table at generation 4 (RELAY_HOT_ROTATION=1s)", func() bool { return currentGeneration() >= 4 })
	if n := db.CountWhere(t, "messages_all", "key = 'cancel-me'"); n != 5 {
		t.Errorf("%d of the 5 rows delayed by an hour are pending after generation %d", n, generation)
	}
	// Cancelled while they wait in whatever generation holds them now.
	cancel := startCommand(t, []string{"cancel", "--key", "cancel-me"}, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name)
	if code := cancel.wait(30 * time.Second); code != 0 {
		t.Fatalf("cancel --key cancel-me exited %d", code)
	}
	relaytest.WaitDrained(t, db, relaytest.Budget(keys*perKey))
	// A producer's key inserted again after its delivery.
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key) VALUES ('events.ordered', 'again', 'k1', 'k1-1')`)
	waitfor.Condition(t, 30*time.Second, "k1-1 archived again, as a duplicate", func() bool {
		return db.CountWhere(t, "archive", "idempotency_key = 'k1-1' AND duplicate") == 1
	})
	relaytest.WaitDrained(t, db, 30*time.Second)

	// Every row archived once; the destination accepted each.
	const n = keys*perKey + 20
	var rows, ids int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM "+db.Table("archive")+" WHERE NOT duplicate").Scan(&rows, &ids); err != nil {
		t.Fatal(err)
	}
	if rows != n || ids != n {
		t.Errorf("the archive holds %d rows of %d ids, want %d, one per id", rows, ids, n)
	}
	accepted := map[string]bool{}
	var events []orderedEvent
	for _, req := range rcv.Requests() {
		if req.Status < 200 || req.Status > 299 || req.ID() == "poison" {
			continue
		}
		accepted[req.ID()] = true
		var e orderedEvent
		if err := json.Unmarshal(req.Body, &e); err != nil {
			t.Fatalf("payload %q: %v", req.Body, err)
		}
		if e.Key != "delayed" {
			events = append(events, e)
		}
	}
	for key := range relaytest.Archive(t, db, "NOT duplicate") {
		if !accepted[key] {
			t.Errorf("event %s was archived but the destination never accepted it", key)
		}
	}
	if name != "unordered" {
		assertInOrder(t, events, keys, perKey)
	}
	for i := 1; i <= 20; i++ {
		id := fmt.Sprintf("delayed-%d", i)
		if at := rcv.Attempts(id); len(at) == 0 || at[0].Before(delayedAt.Add(-50*time.Millisecond)) {
			t.Errorf("delayed row %s first sent at %v, before its time %v", id, at, delayedAt)
		}
	}
	if n := db.CountWhere(t, "dead_letters", "idempotency_key = 'poison' AND reason = 'exhausted'"); n != 1 {
		t.Errorf("the row that always fails is not dead-lettered (%d)", n)
	}
	if n := db.CountWhere(t, "dead_letters", "key = 'cancel-me' AND reason = 'cancelled'"); n != 5 {
		t.Errorf("%d of the 5 delayed rows cancelled by key are dead letters", n)
	}

	// The relays count what they did (a killed relay's counts are gone:
	// some of it, not all of it, is in the survivors').
	var rotations, emptied float64
	counter := func(m, name string) float64 {
		f := regexp.MustCompile(`(?m)^outbox_relay_` + name + `(?:\{[^}]*\})? (\S+)$`).FindStringSubmatch(m)
		if f == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		return v
	}
	for _, p := range relays {
		m := p.metrics()
		rotations += counter(m, "hot_rotations_total")
		emptied += counter(m, "hot_generations_emptied_total")
		if !strings.Contains(m, "outbox_relay_hot_generations{") {
			t.Errorf("a relay does not export hot_generations")
		}
		for _, line := range p.log() {
			// A waiting row carried from under its key's settle would be
			// found by ordered mode's repair a minute later.
			if strings.Contains(line, "made rows claimable that waited behind no older row") {
				t.Errorf("a relay logged: %s", line)
			}
		}
	}
	if rotations == 0 || emptied == 0 {
		t.Errorf("the running relays rotated %v times and emptied %v generations, want some of each", rotations, emptied)
	}
}

// TestProcess_HotRotationOff runs the binary with RELAY_HOT_ROTATION=0
// while rows arrive for longer than the shortest rotation allowed (a
// second): every row is delivered, and the hot table stays in its first
// generation, the one migrated, with no rotation counted.
func TestProcess_HotRotationOff(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	relay := startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "WEBHOOK_URL="+rcv.URL,
		"WEBHOOK_SECRET="+rcv.Secret, "RELAY_HOT_ROTATION=0")
	const waves, perWave = 4, 50
	for w := range waves {
		db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key)
		            SELECT 'events.off', 'x', 'off-' || $1::int || '-' || i FROM generate_series(1, $2::int) AS i`, w, perWave)
		time.Sleep(time.Second)
	}
	relaytest.WaitDrained(t, db, relaytest.Budget(waves*perWave))
	if n := db.Count(t, "archive"); n != waves*perWave {
		t.Errorf("%d rows archived, want %d", n, waves*perWave)
	}
	var slot, generation int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT slot, generation FROM "+db.Table("message_generations")+
		" WHERE state = 'current'").Scan(&slot, &generation); err != nil {
		t.Fatal(err)
	}
	if slot != 1 || generation != 1 {
		t.Errorf("with RELAY_HOT_ROTATION=0 the current generation is %d, in slot %d, after %d s of inserts: want the first, in slot 1", generation, slot, waves)
	}
	if n := metricValue(relay.metrics(), "outbox_relay_hot_rotations_total"); n != 0 {
		t.Errorf("outbox_relay_hot_rotations_total %g, want 0", n)
	}
}

// TestProcess_TheHotTableTurnsFasterWhileTheHorizonIsHeld runs the binary
// with RELAY_HOT_ROTATION=20s on a database of its own while a writer
// inserts. A transaction holding an id, older than the current generation
// once the next rotation has happened, makes the generations turn every
// 5 s (a quarter), which the log says: four rotations come within 40 s,
// where at the usual pace they take at least 60. Once it ends, the log
// says the usual pace is back; every row arrives once. The database is the
// test's own: other tests' transactions would hold its horizon too.
func TestProcess_TheHotTableTurnsFasterWhileTheHorizonIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewInOwnDatabase(t)
	pool, url := db.Pool, db.URL
	srv := natstest.Start(t)
	srv.CreateStream(t, "S", "events.>")
	p := startProcess(t, "DATABASE_URL="+url, "NATS_URL="+srv.URL(), "RELAY_HOT_ROTATION=20s")
	p.waitLog(`"relay started"`)
	w := startWriter(t, db, "events.created")
	current := func() int64 {
		var g int64
		if err := pool.QueryRow(ctx, "SELECT generation FROM outbox.message_generations WHERE state = 'current'").Scan(&g); err != nil {
			t.Fatal(err)
		}
		return g
	}

	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, "BEGIN; SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	before := current()
	waitfor.Condition(t, 60*time.Second, "a generation begun after the transaction", func() bool { return current() > before })
	p.waitLog("the generations turn faster")
	began, from := time.Now(), current()
	waitfor.Condition(t, 60*time.Second, "four more generations while the horizon is held", func() bool { return current() >= from+4 })
	took := time.Since(began)
	t.Logf("four rotations while the horizon was held: %s", took.Round(100*time.Millisecond))
	if took >= 40*time.Second {
		t.Errorf("four rotations took %s while the horizon was held: at a quarter of RELAY_HOT_ROTATION=20s they take about 20s", took.Round(time.Second))
	}
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	p.waitLog("the generations turn at their usual pace")

	inserted := w.halt(t)
	relaytest.WaitDrained(t, db, relaytest.Budget(inserted))
	relaytest.AssertStreamMatchesArchive(t, db, srv, "S", inserted)
}
