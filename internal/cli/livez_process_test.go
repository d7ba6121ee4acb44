package cli

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// livezOutage is how long each outage of TestProcess_LivezStaysUpWhileTheDatabaseOrNATSIsDown
// lasts: several heartbeats (every 10 s, each given up after 5 s) and many
// claims (each given up after a quarter of RELAY_LEASE) and settles meet it.
// The binary's liveness threshold is two minutes at least; that the relay
// stays live through outages longer than its threshold is proved at the
// relay's level, with a shorter one (relay.TestRelay_LiveWhileTheDatabaseDoesNotAnswer).
const livezOutage = 25 * time.Second

// /livez stays 200 while PostgreSQL does not answer (a proxy in front of it
// that stops forwarding without closing a connection: the harder outage, a
// refused connection fails at once) and while NATS is stopped: the relay
// recovers by itself when they return, which /readyz reports, and a
// restart would not help. Once they are back, rows are delivered.
func TestProcess_LivezStaysUpWhileTheDatabaseOrNATSIsDown(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	proxy := db.Proxy(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	p := startProcess(t, "DATABASE_URL="+proxy.URL, "RELAY_SCHEMA="+db.Name, "NATS_URL="+srv.URL(),
		"NATS_SUBJECT_PREFIX=events.", "RELAY_LEASE=2s", "NATS_ACK_TIMEOUT=1s")
	p.waitLog(`"relay started"`)
	base := "http://" + p.addr
	relaytest.InsertRows(t, db, 10, "orders.created")
	relaytest.WaitDrained(t, db, 30*time.Second)

	// livezThrough checks /livez at every poll while the outage lasts.
	livezThrough := func(what string, began time.Time) {
		t.Helper()
		waitfor.Condition(t, livezOutage+30*time.Second, what+" for "+livezOutage.String(), func() bool {
			if code, body := get(t, base+"/livez"); code != http.StatusOK {
				t.Fatalf("/livez = %d %q while %s", code, body, what)
			}
			return time.Since(began) > livezOutage
		})
	}

	proxy.Hold()
	held := time.Now()
	// Rows written while the relay cannot reach the database wait for it.
	relaytest.InsertRows(t, db, 10, "orders.created")
	waitfor.Condition(t, 30*time.Second, "/readyz to fail while the database does not answer", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	livezThrough("the database does not answer", held)
	proxy.Resume()
	waitfor.Condition(t, 60*time.Second, "/readyz to recover with the database", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	})
	relaytest.WaitDrained(t, db, 60*time.Second)

	srv.Stop()
	stopped := time.Now()
	relaytest.InsertRows(t, db, 10, "orders.created")
	waitfor.Condition(t, 30*time.Second, "/readyz to fail while NATS is down", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	livezThrough("NATS is down", stopped)
	srv.Restart()
	relaytest.WaitDrained(t, db, 60*time.Second)
	if code, body := get(t, base+"/livez"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/livez = %d %q once the outages are over", code, body)
	}
}

// /livez answers 200 until the relay says it is stuck, then 503 with why,
// and 200 again once it turns.
func TestEndpoint_LivezFailsWhileTheRelayIsStuck(t *testing.T) {
	t.Parallel()
	ep, _ := startEndpoint(t, endpointLimits{})
	client := newClient(t)
	url := "http://" + ep.addr().String() + "/livez"
	if code, body := getWith(t, client, url); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/livez = %d %q before the relay runs, want 200", code, body)
	}
	var stuck atomic.Pointer[error] // nil: the relay turns
	ep.setLive(func() error {
		if err := stuck.Load(); err != nil {
			return *err
		}
		return nil
	})
	if code, body := getWith(t, client, url); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/livez = %d %q while the relay turns, want 200", code, body)
	}
	why := errors.New("schema orders: the relay no longer turns: stuck: claim loop 1 (rows) for 2m5s without coming round (the limit is 2m0s); a restart is needed")
	stuck.Store(&why)
	if code, body := getWith(t, client, url); code != http.StatusServiceUnavailable || body != "not live: "+why.Error()+"\n" {
		t.Errorf("/livez = %d %q while the relay is stuck, want 503 with why", code, body)
	}
	stuck.Store(nil)
	if code, _ := getWith(t, client, url); code != http.StatusOK {
		t.Errorf("/livez = %d once the relay turns again, want 200", code)
	}
}
