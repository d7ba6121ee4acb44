package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// These tests set variables whose effect only the running binary shows and
// observe that effect. TestSettings_EveryVariableTakesEffect covers the
// rest at the settings level.

// waitLog waits for a log line containing s.
func (p *process) waitLog(s string) {
	p.t.Helper()
	waitfor.Condition(p.t, 30*time.Second, "log line "+s, func() bool {
		return slices.ContainsFunc(p.log(), func(l string) bool { return strings.Contains(l, s) })
	})
}

// listeningPorts returns the TCP ports pid listens on, from /proc.
func listeningPorts(t *testing.T, pid int) []int {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("read the process's descriptors: %v", err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// local_address rem_address st … inode; 0A is LISTEN.
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			port, _ := strconv.ParseInt(hexPort, 16, 32)
			ports = append(ports, int(port))
		}
	}
	return ports
}

func TestProcess_EmptyHTTPAddrListensNowhere(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	p := startProcess(t, relayEnv(db, srv, "RELAY_HTTP_ADDR=")...)
	p.waitLog(`"relay started"`)
	if ports := listeningPorts(t, p.cmd.Process.Pid); len(ports) != 0 {
		t.Errorf("with RELAY_HTTP_ADDR empty the relay listens on %v", ports)
	}
	if slices.ContainsFunc(p.log(), func(l string) bool { return strings.Contains(l, "serving /metrics") }) {
		t.Error("the log says the endpoint is served")
	}

	// The control: the default listens.
	q := startProcess(t, relayEnv(db, srv, "RELAY_HTTP_ADDR=127.0.0.1:0")...)
	q.waitLog(`"relay started"`)
	if ports := listeningPorts(t, q.cmd.Process.Pid); len(ports) != 1 {
		t.Errorf("with RELAY_HTTP_ADDR set the relay listens on %v, want one port", ports)
	}
}

func TestProcess_RELAY_SINKRoutesRowsWithoutADestination(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	rcv := webhooktest.NewReceiver(t)
	p := startProcess(t, relayEnv(db, srv, "WEBHOOK_URL="+rcv.URL, "WEBHOOK_SECRET="+rcv.Secret, "RELAY_SINK=webhook", "RELAY_BACTH_SIZE=5")...)
	p.waitLog(`"did_you_mean":"RELAY_BATCH_SIZE"`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, destination) VALUES
	  ('events.a', 'to the default', 'default-1', NULL),
	  ('events.a', 'to nats', 'nats-1', 'nats')`)
	relaytest.WaitDrained(t, db, 30*time.Second)
	if got := rcv.Accepted(); len(got) != 1 || string(got["default-1"]) != "to the default" {
		t.Errorf("the webhook (RELAY_SINK) accepted %v, want only default-1", got)
	}
	msgs := srv.Messages(t, "EVENTS")
	if len(msgs) != 1 || string(msgs[0].Data) != "to nats" {
		t.Errorf("NATS holds %d messages, want only the row for destination nats", len(msgs))
	}
}

func TestProcess_RELAY_ORDEREDKeepsEachKeyInOrder(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	// Every third event fails its first attempt: without per-key order the
	// retried event arrives after the ones behind it.
	var mu sync.Mutex
	failed := map[string]bool{}
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		id := r.Header.Get("webhook-id")
		seq, _ := strconv.Atoi(id[strings.LastIndex(id, "-")+1:])
		mu.Lock()
		defer mu.Unlock()
		if seq%3 == 0 && !failed[id] {
			failed[id] = true
			w.WriteHeader(http.StatusInternalServerError)
			return http.StatusInternalServerError
		}
		return 0
	})
	env := []string{"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name, "WEBHOOK_URL=" + rcv.URL, "WEBHOOK_SECRET=" + rcv.Secret,
		"RELAY_ORDERED=true", "RELAY_BACKOFF_MIN=50ms", "RELAY_BACKOFF_MAX=200ms", "RELAY_POLL_INTERVAL=10ms"}
	startProcess(t, env...)
	startProcess(t, env...)
	const keys, perKey = 10, 12
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, idempotency_key)
	            SELECT 'orders.changed', convert_to(i::text, 'UTF8'), 'order-' || (i % $1), 'order-' || (i % $1) || '-' || i
	              FROM generate_series(1, $2) AS i`, keys, keys*perKey)
	relaytest.WaitDrained(t, db, 60*time.Second)
	accepted := map[string][]int{}
	for _, req := range rcv.Requests() {
		if req.Status != http.StatusNoContent {
			continue
		}
		id := req.ID()
		key := id[:strings.LastIndex(id, "-")]
		seq, _ := strconv.Atoi(string(bytes.TrimSpace(req.Body)))
		accepted[key] = append(accepted[key], seq)
	}
	if len(accepted) != keys {
		t.Fatalf("accepted events of %d keys, want %d", len(accepted), keys)
	}
	for key, seqs := range accepted {
		if !slices.IsSorted(seqs) || len(seqs) != perKey {
			t.Errorf("key %s: accepted %v, want %d events in insert order", key, seqs, perKey)
		}
	}
}

// RELAY_NOTIFY on the binary: with a poll interval of a minute, a row
// committed after the relay started listening is delivered long before the
// next poll, so only the notification can have woken the relay.
func TestProcess_RELAY_NOTIFYDeliversWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	p := startProcess(t, relayEnv(db, srv, "RELAY_NOTIFY=true", "RELAY_POLL_INTERVAL=1m")...)
	p.waitLog("RELAY_NOTIFY: listening for inserts")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('events.a', 'woken')`)
	relaytest.WaitDrained(t, db, 30*time.Second)
	if msgs := srv.Messages(t, "EVENTS"); len(msgs) != 1 || string(msgs[0].Data) != "woken" {
		t.Errorf("NATS holds %d messages, want the one row", len(msgs))
	}
}

// RELAY_POLL_INTERVAL on the binary, while a stream flows: with an
// interval of 4 s and a row committed every 0.9 s, the claims between two
// rows find nothing, and the relay looks again a tenth of the interval
// later rather than the whole of it, so each row (once the relay's first
// pauses are over) arrives within 2 s of its commit; waiting the whole
// interval after an empty claim left rows waiting about 4 s.
func TestProcess_RELAY_POLL_INTERVALDoesNotHoldUpAStreamsRows(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	startProcess(t, relayEnv(db, srv, "RELAY_POLL_INTERVAL=4s")...)
	const rows, unmeasured = 14, 6
	for range rows {
		db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('events.stream', 'x')`)
		time.Sleep(900 * time.Millisecond)
	}
	relaytest.WaitDrained(t, db, 30*time.Second)
	r, err := db.Pool.Query(context.Background(), `
SELECT id, extract(epoch FROM delivered_at - created_at)::float8
  FROM `+db.Table("archive")+` ORDER BY id OFFSET $1`, unmeasured)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	read := 0
	for r.Next() {
		read++
		var id int64
		var waited float64
		if err := r.Scan(&id, &waited); err != nil {
			t.Fatal(err)
		}
		if waited > 2 {
			t.Errorf("row %d was delivered %.2fs after its commit, want within 2s (half of RELAY_POLL_INTERVAL=4s)", id, waited)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if read != rows-unmeasured {
		t.Errorf("read %d of the %d measured rows in the archive", read, rows-unmeasured)
	}
	if n := len(srv.Messages(t, "EVENTS")); n != rows {
		t.Errorf("NATS holds %d messages, want %d", n, rows)
	}
}

// RELAY_MAX_IN_FLIGHT_BYTES on the binary: with a 64 KiB budget and rows of
// 30,000 bytes, at most two rows are ever leased at once, though the batch
// size and the webhook's concurrency would allow many more; all arrive.
func TestProcess_RELAY_MAX_IN_FLIGHT_BYTESBoundsThePayloadsHeld(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		time.Sleep(30 * time.Millisecond) // a slow receiver: rows stay in flight
		return 0
	})
	const n, size, budget = 40, 30_000, 65536
	db.Exec(t, `INSERT INTO %s.messages (topic, payload)
SELECT 'events.big', convert_to(repeat('x', $1), 'UTF8') FROM generate_series(1, $2)`, size, n)
	startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "WEBHOOK_URL="+rcv.URL, "WEBHOOK_SECRET="+rcv.Secret,
		"RELAY_MAX_IN_FLIGHT_BYTES="+strconv.Itoa(budget))
	peak := 0
	waitfor.Condition(t, relaytest.Budget(n), "the rows to be delivered", func() bool {
		var leased, left int
		if err := db.Pool.QueryRow(context.Background(), "SELECT coalesce(sum(octet_length(payload)) FILTER (WHERE leased_by IS NOT NULL), 0), count(*) FROM "+
			db.Table("messages")).Scan(&leased, &left); err != nil {
			return false
		}
		peak = max(peak, leased)
		return left == 0
	})
	if peak > budget {
		t.Errorf("%d payload bytes were leased at once, want at most RELAY_MAX_IN_FLIGHT_BYTES=%d", peak, budget)
	}
	if peak < size {
		t.Errorf("the sampling never saw a leased row (peak %d bytes)", peak)
	}
	if got := len(rcv.Accepted()); got != n {
		t.Errorf("the receiver accepted %d rows, want %d", got, n)
	}
}
