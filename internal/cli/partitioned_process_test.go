package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// docs/guarantees.md's promises for RELAY_MODE=partitioned, kept by real relay
// processes that die, join and pause: the relays share the 64 buckets, a
// bucket is processed by one relay at a time (each acquisition has a new
// epoch, and claims and settles are fenced by it), a dead relay's buckets
// are taken over, a paused one settles nothing it lost, each key's events
// reach the destination in insert order, and every relay on a schema runs
// the same mode.

// partitionedLease is the RELAY_LEASE of these tests: short, so that a
// dead or paused relay's buckets move within seconds. Rounds then come
// every 300ms, and a bucket's lease lasts thirteen rounds longer than a
// row's (6.9 s), rewritten about every tenth round.
const partitionedLease = 3 * time.Second

// partitionedEnv is the environment of a partitioned relay named id
// delivering to rcv, logging its buckets and claims (debug). Its database
// connections carry its id as application_name, so that a test can tell
// them apart in pg_stat_activity.
func partitionedEnv(t *testing.T, db *dbtest.Schema, rcv *webhooktest.Receiver, id string) []string {
	t.Helper()
	return []string{
		"DATABASE_URL=" + withApplicationName(t, db.URL, id), "RELAY_SCHEMA=" + db.Name, "RELAY_ID=" + id,
		"RELAY_MODE=partitioned", "RELAY_LEASE=" + partitionedLease.String(), "LOG_LEVEL=debug",
		"WEBHOOK_URL=" + rcv.URL, "WEBHOOK_SECRET=" + rcv.Secret,
		// At most 60% of the lease; a loaded machine still answers a
		// request that the receiver holds a few milliseconds well within it.
		"WEBHOOK_TIMEOUT=1500ms", "RELAY_BACKOFF_MIN=50ms", "RELAY_BACKOFF_MAX=500ms",
	}
}

// withApplicationName returns the connection string u naming its
// connections name in pg_stat_activity.
func withApplicationName(t *testing.T, u, name string) string {
	t.Helper()
	if !strings.Contains(u, "://") {
		return u + " application_name=" + name // key=value form: later keys win
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	q := parsed.Query()
	q.Set("application_name", name)
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// slowReceiver is a webhook endpoint that accepts every request after
// holding it for delay: a destination slow enough that the relays have
// deliveries in flight whenever a test stops one of them.
func slowReceiver(t *testing.T, delay time.Duration) *webhooktest.Receiver {
	rcv, _ := slowReceiverCounting(t, delay)
	return rcv
}

// heldRequests counts, per relay, the requests a slow receiver is holding:
// a relay is told apart by the ?relay= its WEBHOOK_URL carries (relayURL).
type heldRequests struct {
	mu   sync.Mutex
	held map[string]int
}

// from returns how many of relay id's requests the receiver holds now.
func (h *heldRequests) from(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[id]
}

// relayURL is rcv's URL as relay id's WEBHOOK_URL, for heldRequests.
func relayURL(rcv *webhooktest.Receiver, id string) string {
	return rcv.URL + "?relay=" + url.QueryEscape(id)
}

// slowReceiverCounting is slowReceiver, and what it holds of each relay's.
func slowReceiverCounting(t *testing.T, delay time.Duration) (*webhooktest.Receiver, *heldRequests) {
	t.Helper()
	rcv := webhooktest.NewReceiver(t)
	h := &heldRequests{held: map[string]int{}}
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		id := r.URL.Query().Get("relay")
		h.mu.Lock()
		h.held[id]++
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.held[id]--
			h.mu.Unlock()
		}()
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		case <-rcv.Done():
		}
		return 0 // the default: 204
	})
	return rcv, h
}

// insertUnkeyed writes n rows without a key, with idempotency keys free-i.
func insertUnkeyed(t *testing.T, db *dbtest.Schema, n int) {
	t.Helper()
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key)
	            SELECT 'events.free', convert_to(json_build_object('free', i)::text, 'UTF8'), 'free-' || i
	              FROM generate_series(1, $1) AS i`, n)
}

// acceptedByReceiver returns the keyed events rcv accepted (2xx), in the
// order it answered them, and the webhook-ids of every event it accepted.
func acceptedByReceiver(t *testing.T, rcv *webhooktest.Receiver) ([]orderedEvent, map[string]bool) {
	t.Helper()
	var keyed []orderedEvent
	ids := map[string]bool{}
	for _, req := range rcv.Requests() {
		if req.Status < 200 || req.Status > 299 {
			continue
		}
		ids[req.ID()] = true
		if strings.HasPrefix(req.ID(), "free-") {
			continue
		}
		var e orderedEvent
		if err := json.Unmarshal(req.Body, &e); err != nil {
			t.Fatalf("payload %q: %v", req.Body, err)
		}
		keyed = append(keyed, e)
	}
	return keyed, ids
}

// assertDeliveredOnce checks that the n rows left the hot table for the
// archive exactly once each, and that the destination accepted every one.
func assertDeliveredOnce(t *testing.T, db *dbtest.Schema, rcv *webhooktest.Receiver, n int) {
	t.Helper()
	if left := db.Count(t, "messages_all"); left != 0 {
		t.Errorf("%d rows left in the hot table", left)
	}
	var rows, ids int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT id) FROM "+db.Table("archive")).Scan(&rows, &ids); err != nil {
		t.Fatal(err)
	}
	if rows != n || ids != n {
		t.Errorf("the archive holds %d rows of %d ids, want %d rows, one per id", rows, ids, n)
	}
	_, accepted := acceptedByReceiver(t, rcv)
	missing := 0
	for key := range relaytest.Archive(t, db, "true") {
		if !accepted[key] {
			if missing++; missing <= 5 {
				t.Errorf("event %s was archived but the destination never accepted it", key)
			}
		}
	}
	if missing > 5 {
		t.Errorf("... and %d more events never accepted", missing-5)
	}
}

// bucketOwners returns how many buckets each relay holds now, by the
// buckets table (a lease that has not run out).
func bucketOwners(t *testing.T, db *dbtest.Schema) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		"SELECT owner, count(*) FROM "+db.Table("buckets")+" WHERE owner IS NOT NULL AND lease_until > now() GROUP BY owner")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	owners := map[string]int{}
	for rows.Next() {
		var owner string
		var n int
		if err := rows.Scan(&owner, &n); err != nil {
			t.Fatal(err)
		}
		owners[owner] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return owners
}

// waitShares waits until the buckets are shared exactly as want (relay id
// → number of buckets).
func waitShares(t *testing.T, db *dbtest.Schema, want map[string]int) {
	t.Helper()
	var got map[string]int
	waitfor.Condition(t, 60*time.Second, fmt.Sprintf("the buckets to be shared as %v", want), func() bool {
		got = bucketOwners(t, db)
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
}

// metricValue returns the value of series (a metric name with its labels,
// in the order /metrics writes them) in the exposition text, 0 when absent.
func metricValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// waitOwned waits until p reports want buckets owned on /metrics (the
// gauge is set just after a round commits).
func waitOwned(t *testing.T, p *process, relay string, want int) {
	t.Helper()
	waitfor.Condition(t, 30*time.Second, fmt.Sprintf("%s to report %d buckets owned", relay, want), func() bool {
		return metricValue(p.metrics(), ownedSeries) == float64(want)
	})
}

const (
	deliveredSeries = `outbox_relay_messages_total{outcome="delivered",sink="webhook"}`
	ownedSeries     = `outbox_relay_buckets_owned`
	leaseLostSeries = `outbox_relay_lease_lost_total`
	acquiredSeries  = `outbox_relay_bucket_changes_total{change="acquired"}`
)

// fence is a bucket and the epoch under which a relay held it.
type fence struct {
	bucket int
	epoch  int64
}

// bucketEvent is one line of a relay's log about its buckets: it acquired,
// released or lost some, or claimed rows of some. Epochs are 0 where the
// line names none (lost, released at shutdown).
type bucketEvent struct {
	relay  string
	line   int // its place in the relay's log: the order the relay wrote it
	at     time.Time
	kind   string // acquired, released, lost, claimed
	fences []fence
}

// bucketEvents parses p's log lines about its buckets. A line cut short by
// a SIGKILL is skipped.
func bucketEvents(t *testing.T, relay string, p *process) []bucketEvent {
	t.Helper()
	var out []bucketEvent
	for i, line := range p.log() {
		var entry struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			Buckets []int     `json:"buckets"`
			Epochs  []int64   `json:"epochs"`
			Fences  string    `json:"fences"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		e := bucketEvent{relay: relay, line: i, at: entry.Time}
		switch {
		case entry.Msg == "acquired buckets":
			e.kind = "acquired"
		case entry.Msg == "released buckets", entry.Msg == "released buckets at shutdown":
			e.kind = "released"
		case strings.HasPrefix(entry.Msg, "lost buckets"):
			e.kind = "lost"
		case entry.Msg == "claimed rows of owned buckets":
			e.kind = "claimed"
			for _, f := range strings.Split(entry.Fences, ",") {
				b, ep, ok := strings.Cut(f, ":")
				bucket, err1 := strconv.Atoi(b)
				epoch, err2 := strconv.ParseInt(ep, 10, 64)
				if !ok || err1 != nil || err2 != nil {
					t.Fatalf("relay %s: fences %q do not read bucket:epoch,…", relay, entry.Fences)
				}
				e.fences = append(e.fences, fence{bucket, epoch})
			}
			out = append(out, e)
			continue
		default:
			continue
		}
		for j, b := range entry.Buckets {
			f := fence{bucket: b}
			if j < len(entry.Epochs) {
				f.epoch = entry.Epochs[j]
			}
			e.fences = append(e.fences, f)
		}
		out = append(out, e)
	}
	return out
}

// bucketHistory is what the relays' logs say about the buckets.
type bucketHistory struct {
	// acquiredBy names the relay that acquired each (bucket, epoch).
	acquiredBy map[fence]string
	// held is what each relay held at its last line.
	held map[string]map[int]int64
	// claims counts each relay's claims that leased rows.
	claims map[string]int
	// lastClaim is, per relay, the buckets it claimed rows of and the time
	// of its last such claim.
	lastClaim map[string]map[int]time.Time
}

// assertBucketsExclusive checks, from every relay's log (events, by relay
// id), that no bucket was processed by two relays at once:
//   - each (bucket, epoch) was acquired by one relay, and rows claimed under
//     it were claimed by that relay alone, between its acquiring the bucket
//     and its giving it up (released or lost);
//   - per bucket, by log time, the epochs of claims never go down: once a
//     claim under a later epoch is logged, no claim under an earlier one is;
//   - the epochs in the buckets table are at least the latest the logs show.
func assertBucketsExclusive(t *testing.T, db *dbtest.Schema, events map[string][]bucketEvent) bucketHistory {
	t.Helper()
	h := bucketHistory{acquiredBy: map[fence]string{}, held: map[string]map[int]int64{},
		claims: map[string]int{}, lastClaim: map[string]map[int]time.Time{}}
	problems := 0
	problem := func(format string, args ...any) {
		if problems++; problems <= 20 {
			t.Errorf(format, args...)
		}
	}
	for relay, evs := range events {
		for _, e := range evs {
			if e.kind != "acquired" {
				continue
			}
			for _, f := range e.fences {
				if other, ok := h.acquiredBy[f]; ok {
					problem("bucket %d epoch %d was acquired by %s and by %s", f.bucket, f.epoch, other, relay)
				}
				h.acquiredBy[f] = relay
			}
		}
	}
	claimedBy := map[fence]string{}
	var claims []bucketEvent // one per bucket of each claim
	latest := map[int]int64{}
	for relay, evs := range events {
		held := map[int]int64{}
		ended := map[fence]bool{} // given up by this relay
		h.lastClaim[relay] = map[int]time.Time{}
		for _, e := range evs {
			for _, f := range e.fences {
				latest[f.bucket] = max(latest[f.bucket], f.epoch)
				switch e.kind {
				case "acquired":
					held[f.bucket] = f.epoch
				case "released", "lost":
					if f.epoch == 0 {
						f.epoch = held[f.bucket]
					}
					ended[f] = true
					if held[f.bucket] == f.epoch {
						delete(held, f.bucket)
					}
				case "claimed":
					if by := h.acquiredBy[f]; by != relay {
						problem("%s claimed rows of bucket %d under epoch %d, which it did not acquire (acquired by %q)", relay, f.bucket, f.epoch, by)
					}
					if other, ok := claimedBy[f]; ok && other != relay {
						problem("rows of bucket %d under epoch %d were claimed by %s and by %s", f.bucket, f.epoch, other, relay)
					}
					claimedBy[f] = relay
					if ended[f] {
						problem("%s claimed rows of bucket %d under epoch %d after giving it up (log line %d)", relay, f.bucket, f.epoch, e.line)
					}
					h.lastClaim[relay][f.bucket] = e.at
					claims = append(claims, bucketEvent{relay: relay, line: e.line, at: e.at, kind: e.kind, fences: []fence{f}})
				}
			}
			if e.kind == "claimed" {
				h.claims[relay]++
			}
		}
		h.held[relay] = held
	}
	slices.SortStableFunc(claims, func(a, b bucketEvent) int { return a.at.Compare(b.at) })
	newest := map[int]bucketEvent{}
	for _, c := range claims {
		f := c.fences[0]
		if prev, ok := newest[f.bucket]; ok && prev.fences[0].epoch > f.epoch {
			problem("bucket %d: %s claimed rows under epoch %d at %s, after %s claimed rows under the later epoch %d at %s",
				f.bucket, c.relay, f.epoch, c.at.Format(time.StampMicro), prev.relay, prev.fences[0].epoch, prev.at.Format(time.StampMicro))
			continue
		}
		newest[f.bucket] = c
	}
	rows, err := db.Pool.Query(context.Background(), "SELECT bucket, epoch FROM "+db.Table("buckets"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var bucket int
		var epoch int64
		if err := rows.Scan(&bucket, &epoch); err != nil {
			t.Fatal(err)
		}
		if epoch < latest[bucket] {
			problem("bucket %d is at epoch %d in the buckets table, but the logs show epoch %d", bucket, epoch, latest[bucket])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if problems > 20 {
		t.Errorf("... and %d more problems", problems-20)
	}
	if len(claims) == 0 {
		t.Error("no relay logged a claim: LOG_LEVEL=debug is not in effect, or the log lines changed")
	}
	return h
}

// TestProcess_PartitionedFourRelaysOneKilledOneAddedKeepEveryKeyInOrder: a
// relay of four dies mid-run and a fifth joins; its buckets are taken over,
// the newcomer gets its share, every event is delivered, each key's in
// insert order, and the logs show no bucket processed by two relays at once.
func TestProcess_PartitionedFourRelaysOneKilledOneAddedKeepEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	dbtest.Exclusive(t, "many relays, many events")
	db := dbtest.New(t)
	// Each request is held a little: the run lasts long enough for a relay
	// to die and another to join while rows are left.
	rcv := slowReceiver(t, 15*time.Millisecond)
	env := func(id string) []string {
		return append(partitionedEnv(t, db, rcv, id), "WEBHOOK_CONCURRENCY=4")
	}
	relays := map[string]*process{}
	for _, id := range []string{"relay-1", "relay-2", "relay-3", "relay-4"} {
		relays[id] = startProcess(t, env(id)...)
	}
	waitShares(t, db, map[string]int{"relay-1": 16, "relay-2": 16, "relay-3": 16, "relay-4": 16})

	const keys, perKey, unkeyed = 200, 40, 400
	const total = keys*perKey + unkeyed
	insertOrdered(t, db, keys, perKey)
	insertUnkeyed(t, db, unkeyed)
	waitfor.Condition(t, relaytest.Budget(total/4), "a quarter of the events to be delivered", func() bool {
		return db.Count(t, "archive") > total/4
	})
	victim := relays["relay-2"]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.wait(10 * time.Second)
	killedAt := time.Now()
	left := db.Count(t, "messages_all")
	relays["relay-5"] = startProcess(t, env("relay-5")...)
	relaytest.WaitDrained(t, db, relaytest.Budget(total))
	t.Logf("%d of %d rows were left when relay-2 was killed; drained %s later", left, total, time.Since(killedAt).Round(time.Millisecond))
	if left < total/4 {
		t.Fatalf("only %d rows were left when a relay was killed; the test proves little", left)
	}
	// The fleet settles: the dead relay's buckets are taken over, the new
	// relay has its share.
	waitShares(t, db, map[string]int{"relay-1": 16, "relay-3": 16, "relay-4": 16, "relay-5": 16})

	keyed, _ := acceptedByReceiver(t, rcv)
	assertInOrder(t, keyed, keys, perKey)
	assertDeliveredOnce(t, db, rcv, total)

	events := map[string][]bucketEvent{}
	for id, p := range relays {
		events[id] = bucketEvents(t, id, p)
	}
	h := assertBucketsExclusive(t, db, events)
	// The dead relay's buckets were acquired by the others under later
	// epochs, and some had rows claimed after the kill: the takeover
	// happened while there was work.
	orphaned := h.held["relay-2"]
	if len(orphaned) == 0 {
		t.Fatal("relay-2 held no bucket when it was killed")
	}
	claimedAfterKill := 0
	for bucket, epoch := range orphaned {
		var takenBy []string
		for f, relay := range h.acquiredBy {
			if f.bucket == bucket && f.epoch > epoch && relay != "relay-2" {
				takenBy = append(takenBy, relay)
			}
		}
		if len(takenBy) == 0 {
			t.Errorf("bucket %d, held by relay-2 under epoch %d when it was killed, was never acquired by another relay", bucket, epoch)
		}
		for relay, last := range h.lastClaim {
			if relay == "relay-2" {
				continue
			}
			if at, ok := last[bucket]; ok && at.After(killedAt) {
				claimedAfterKill++
				break
			}
		}
	}
	t.Logf("relay-2 held %d buckets when killed, %d of them had rows claimed by another relay after the kill; relay-5 logged %d claims",
		len(orphaned), claimedAfterKill, h.claims["relay-5"])
	if claimedAfterKill == 0 {
		t.Errorf("no bucket of the killed relay had rows claimed by another relay after the kill: the takeover came after the work")
	}
	// The relay that joined acquired buckets and delivered part of the
	// load.
	if h.claims["relay-5"] == 0 {
		t.Error("relay-5 joined but claimed no rows")
	}
	if n := metricValue(relays["relay-5"].metrics(), acquiredSeries); n < 16 {
		t.Errorf("relay-5 counts %v buckets acquired, want at least its share, 16", n)
	}
	for _, id := range []string{"relay-1", "relay-3", "relay-4", "relay-5"} {
		waitOwned(t, relays[id], id, 16)
	}
}

// pauseWithRowsInFlight sends SIGSTOP to p (whose database connections are
// named id) at a moment when it has rows claimed and not settled, and lets
// the statements it had sent end. It pauses the relay outside any
// transaction: a relay frozen inside its buckets' round keeps the schema's
// bucket lock, and then no other relay can renew or take over a bucket until
// it resumes (a liveness problem of its own, not what this test is about).
// It tries again, after SIGCONT, until such a moment comes, and returns how
// many rows the paused relay has leased and not settled.
//
// Rows leased in the table are not yet rows in the relay's hands: paused
// after its claim committed and before it read the reply, the relay finds
// the claim's deadline passed when it resumes, and never sees those rows.
// So the moment must also find a request of the relay's held by the
// receiver (held, from a slowReceiverCounting whose relayURL it posts to):
// a delivery whose outcome the relay has still to settle.
func pauseWithRowsInFlight(t *testing.T, db *dbtest.Schema, p *process, id string, held *heldRequests) int {
	t.Helper()
	ctx := context.Background()
	for attempt := 1; ; attempt++ {
		if attempt > 50 {
			t.Fatalf("found no moment to pause %s with rows in flight and no transaction open", id)
		}
		waitfor.Condition(t, 60*time.Second, id+" to have rows in flight", func() bool {
			var n int
			_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("messages")+" WHERE leased_by = $1 AND leased_until > now()", id).Scan(&n)
			return n > 0
		})
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		delivering := held.from(id) > 0
		// Statements it sent before it stopped run to their end.
		var inTx, inFlight int
		waitfor.Condition(t, 30*time.Second, "the statements "+id+" sent to end", func() bool {
			var active int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'active'),
			                                     count(*) FILTER (WHERE state LIKE 'idle in transaction%')
			                                FROM pg_stat_activity WHERE application_name = $1`, id).Scan(&active, &inTx)
			return err == nil && active == 0
		})
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("messages")+" WHERE leased_by = $1 AND leased_until > now()", id).Scan(&inFlight); err != nil {
			t.Fatal(err)
		}
		if inTx == 0 && inFlight > 0 && delivering {
			t.Logf("%s paused at attempt %d with %d rows in flight", id, attempt, inFlight)
			return inFlight
		}
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}

// archivedInLog returns the number of rows archived by p's "settled" log
// lines from line from on.
func archivedInLog(t *testing.T, p *process, from int) int {
	t.Helper()
	n := 0
	for _, line := range p.log()[from:] {
		var entry struct {
			Msg         string `json:"msg"`
			NumArchived int    `json:"num_archived"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "settled" {
			n += entry.NumArchived
		}
	}
	return n
}

// waitRenewals waits until the lease of one of the buckets relay id holds
// has been rewritten n times: the relay has run about ten rounds for each
// (a round rewrites a lease only as it nears its end).
func waitRenewals(t *testing.T, db *dbtest.Schema, id string, n int) {
	t.Helper()
	seen := map[time.Time]bool{}
	waitfor.Condition(t, 60*time.Second, fmt.Sprintf("%s to renew its buckets %d times", id, n), func() bool {
		var until time.Time
		err := db.Pool.QueryRow(context.Background(),
			"SELECT lease_until FROM "+db.Table("buckets")+" WHERE owner = $1 ORDER BY bucket LIMIT 1", id).Scan(&until)
		if err == nil {
			seen[until] = true
		}
		return len(seen) > n
	})
}

// TestProcess_PartitionedPausedRelaySettlesNothingItLost: a relay frozen
// with deliveries in flight loses its buckets to the other, which delivers
// its rows; once it resumes it writes none of its stale outcomes, says it
// lost its buckets, and takes its share again.
func TestProcess_PartitionedPausedRelaySettlesNothingItLost(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	// Slow enough that relay A always has deliveries in flight.
	rcv, held := slowReceiverCounting(t, 100*time.Millisecond)
	a := startProcess(t, append(partitionedEnv(t, db, rcv, "relay-a"), "WEBHOOK_URL="+relayURL(rcv, "relay-a"))...)
	b := startProcess(t, partitionedEnv(t, db, rcv, "relay-b")...)
	waitShares(t, db, map[string]int{"relay-a": 32, "relay-b": 32})

	const keys, perKey, unkeyed = 100, 10, 200
	const total = keys*perKey + unkeyed
	insertOrdered(t, db, keys, perKey)
	insertUnkeyed(t, db, unkeyed)
	waitfor.Condition(t, relaytest.Budget(total), "some events to be delivered", func() bool {
		return db.Count(t, "archive") > 0
	})
	lostBefore := metricValue(a.metrics(), leaseLostSeries)
	inFlight := pauseWithRowsInFlight(t, db, a, "relay-a", held)

	// B takes over A's buckets once their leases run out, and delivers
	// everything, A's rows in flight included.
	waitShares(t, db, map[string]int{"relay-b": 64})
	relaytest.WaitDrained(t, db, relaytest.Budget(total))
	assertDeliveredOnce(t, db, rcv, total)

	resumedAt := len(a.log()) // A wrote nothing while it was stopped
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// A finds out it lost its buckets, drops the outcomes of the rows it
	// had in flight rather than settle them, and gets its share back. The
	// settles it had sent before the pause were written then; their replies
	// are read, and logged, as soon as it resumes, before its first round
	// finds its buckets gone: A must archive nothing after that line.
	waitfor.Condition(t, 30*time.Second, "relay-a to log that it lost its buckets", func() bool {
		return slices.ContainsFunc(a.log()[resumedAt:], func(l string) bool { return strings.Contains(l, `"msg":"lost buckets`) })
	})
	lostAt := resumedAt + slices.IndexFunc(a.log()[resumedAt:], func(l string) bool { return strings.Contains(l, `"msg":"lost buckets`) })
	waitShares(t, db, map[string]int{"relay-a": 32, "relay-b": 32})
	waitOwned(t, a, "relay-a", 32)
	waitOwned(t, b, "relay-b", 32)
	deliveredBack := metricValue(a.metrics(), deliveredSeries)
	waitRenewals(t, db, "relay-a", 1)

	if n := archivedInLog(t, a, lostAt); n != 0 {
		t.Errorf("relay-a archived %d rows after it lost its buckets", n)
	}
	metricsA, metricsB := a.metrics(), b.metrics()
	if now := metricValue(metricsA, deliveredSeries); now != deliveredBack {
		t.Errorf("relay-a's delivered count went from %v to %v after it resumed", deliveredBack, now)
	}
	if lost := metricValue(metricsA, leaseLostSeries); lost <= lostBefore {
		t.Errorf("relay-a had %d rows in flight when paused, but outbox_relay_lease_lost_total stayed at %v: its outcomes were not dropped",
			inFlight, lost)
	}
	// No row counted delivered twice across the fleet: A counted none of
	// the outcomes it was fenced out of. (The count may fall short: a
	// settle A sent before the pause was written, but its reply came after
	// its deadline, so A could not know and did not count it.)
	if sum := metricValue(metricsA, deliveredSeries) + metricValue(metricsB, deliveredSeries); sum > total {
		t.Errorf("the relays count %v deliveries of %d rows: some were counted twice", sum, total)
	}
	assertDeliveredOnce(t, db, rcv, total)
}

// TestProcess_PartitionedModeRefusesToMixWithOtherModes: a relay whose mode
// differs from the relays alive on the schema does not start, and says
// which setting to change; RELAY_MODE=partitioned with RELAY_ORDERED=true is
// refused before connecting.
func TestProcess_PartitionedModeRefusesToMixWithOtherModes(t *testing.T) {
	t.Parallel()
	t.Run("BesideAnOrderedRelay", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		srv := natstest.Start(t)
		ordered := startProcess(t, relayEnv(db, srv, "RELAY_ORDERED=true")...)
		ordered.waitLog(`"relay started"`)
		partitioned := startProcess(t, relayEnv(db, srv, "RELAY_MODE=partitioned")...)
		if code := partitioned.wait(30 * time.Second); code != exitUsage {
			t.Fatalf("a partitioned relay beside an ordered one exited %d, want %d", code, exitUsage)
		}
		log := strings.Join(partitioned.log(), "\n")
		for _, want := range []string{"RELAY_MODE", "every relay on a schema must run the same mode", "(ordered)"} {
			if !strings.Contains(log, want) {
				t.Errorf("the refusal does not say %q:\n%s", want, log)
			}
		}
		if !ordered.running() {
			t.Error("the ordered relay stopped")
		}
		var owned int
		if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Table("buckets")+" WHERE owner IS NOT NULL").Scan(&owned); err != nil || owned != 0 {
			t.Errorf("%d buckets owned (%v) after the partitioned relay was refused, want none", owned, err)
		}
	})
	t.Run("BesideAPartitionedRelay", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		srv := natstest.Start(t)
		partitioned := startProcess(t, relayEnv(db, srv, "RELAY_MODE=partitioned")...)
		partitioned.waitLog(`"acquired buckets"`)
		for name, mode := range map[string]string{"RELAY_ORDERED": "RELAY_ORDERED=true", "RELAY_MODE": "RELAY_MODE=unordered"} {
			other := startProcess(t, relayEnv(db, srv, mode)...)
			if code := other.wait(30 * time.Second); code != exitUsage {
				t.Fatalf("a relay with %s beside a partitioned one exited %d, want %d", mode, code, exitUsage)
			}
			log := strings.Join(other.log(), "\n")
			for _, want := range []string{name, "every relay on a schema must run the same mode", "(partitioned)"} {
				if !strings.Contains(log, want) {
					t.Errorf("%s: the refusal does not say %q:\n%s", mode, want, log)
				}
			}
		}
		if !partitioned.running() {
			t.Error("the partitioned relay stopped")
		}
	})
	t.Run("WithRELAY_ORDERED", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		srv := natstest.Start(t)
		p := startProcess(t, relayEnv(db, srv, "RELAY_MODE=partitioned", "RELAY_ORDERED=true")...)
		if code := p.wait(30 * time.Second); code != exitUsage {
			t.Fatalf("RELAY_MODE=partitioned with RELAY_ORDERED=true exited %d, want %d", code, exitUsage)
		}
		log := strings.Join(p.log(), "\n")
		if !strings.Contains(log, `invalid RELAY_MODE="partitioned"`) || !strings.Contains(log, "RELAY_ORDERED=true") {
			t.Errorf("the refusal does not name RELAY_MODE and RELAY_ORDERED:\n%s", log)
		}
		if strings.Contains(log, `"relay started"`) {
			t.Error("the relay started")
		}
		var mode string
		if err := db.Pool.QueryRow(context.Background(), "SELECT mode FROM "+db.Table("relay_mode")).Scan(&mode); err != nil || mode == "partitioned" {
			t.Errorf("the schema's mode is %q (%v) after a refused configuration, want it untouched", mode, err)
		}
	})
}
