package cli

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// A webhook outage spends no attempts: while the endpoint is down the
// webhook sink holds the rows back, and after each pause one request
// probes the endpoint instead of the whole waiting batch. With
// RELAY_MAX_ATTEMPTS=3 an outage of several pauses dead-letters nothing,
// and every row is delivered once when the endpoint is back.

// outageRows is how many rows wait through an outage; outageLasts how long
// the endpoint stays down: past the sink's first pauses (1s, then 2s),
// where every row would have spent its three attempts had each pause's end
// sent the whole waiting batch again.
const (
	outageRows  = 20
	outageLasts = 6 * time.Second
)

// outage is an outage of a webhook endpoint for endureOutage.
type outage struct {
	// url is WEBHOOK_URL, down from the start.
	url string
	// opening is how many failures pause the sink, each spending its
	// row's attempt; no other failure may spend one.
	opening int
	// seen says the receiver records the failed requests (it answers
	// them).
	seen bool
	// end brings the endpoint back.
	end func()
}

// endureOutage starts a relay with RELAY_MAX_ATTEMPTS=3 posting to o.url,
// writes rows, keeps the endpoint down for outageLasts, then ends the
// outage and checks what it cost: no dead letters, every row delivered
// once (to rcv), no attempt spent but those of the failures that paused
// the sink, and the outage logged as rows waiting without spending
// attempts while one request probes the endpoint after each pause.
func endureOutage(t *testing.T, db *dbtest.Schema, rcv *webhooktest.Receiver, o outage) {
	t.Helper()
	p := startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name,
		"WEBHOOK_URL="+o.url, "WEBHOOK_SECRET="+rcv.Secret, "RELAY_MAX_ATTEMPTS=3")
	p.metrics() // the relay is up
	began := time.Now()
	relaytest.InsertRows(t, db, outageRows, "orders.created")
	waitfor.Condition(t, 2*outageLasts, "the outage to last "+outageLasts.String(), func() bool {
		return time.Since(began) >= outageLasts || db.Count(t, "dead_letters") > 0
	})
	if n := db.Count(t, "dead_letters"); n > 0 {
		t.Fatalf("%d rows reached the dead letters %s into a webhook outage, with RELAY_MAX_ATTEMPTS=3", n, time.Since(began).Round(time.Second))
	}
	failed := len(rcv.Requests())
	o.end()
	relaytest.WaitDrained(t, db, relaytest.Budget(outageRows))

	if n := db.Count(t, "dead_letters"); n > 0 {
		t.Errorf("%d rows reached the dead letters", n)
	}
	delivered := map[string]int{}
	for _, req := range rcv.Requests() {
		if req.Status >= 200 && req.Status < 300 {
			delivered[req.ID()]++
		}
	}
	if len(delivered) != outageRows {
		t.Errorf("%d rows delivered, want %d", len(delivered), outageRows)
	}
	for id, n := range delivered {
		if n != 1 {
			t.Errorf("row %s delivered %d times, want once", id, n)
		}
	}
	if o.seen {
		// Each row was posted once as the outage began (the batch was
		// in flight when the sink paused), then one request per pause.
		if failed == 0 {
			t.Fatal("no request reached the endpoint during the outage: the test proves nothing")
		}
		if failed > outageRows+5 {
			t.Errorf("%d requests failed during the outage, want at most %d: one per row as it began, then one probe per pause", failed, outageRows+5)
		}
	}
	var spent, most int
	if err := db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FILTER (WHERE attempts > 1), coalesce(max(attempts), 0) FROM "+db.Table("archive")).Scan(&spent, &most); err != nil {
		t.Fatal(err)
	}
	t.Logf("the outage cost %d failed requests the endpoint saw; %d rows spent an attempt on it", failed, spent)
	if spent > o.opening || most > 2 {
		t.Errorf("%d rows spent an attempt on the outage (the most attempts: %d); want at most the %d whose failures paused the sink, one each", spent, most, o.opening)
	}
	var paused, waits bool
	for _, line := range p.log() {
		paused = paused || strings.Contains(line, "pausing deliveries: rows wait without spending attempts, and after the pause one request probes the endpoint")
		waits = waits || strings.Contains(line, "sink unavailable: its rows wait in the table, without spending attempts")
	}
	if !paused || !waits {
		t.Errorf("the log does not say that the webhook sink paused, one request probing after each pause (%v), and that the rows wait without spending attempts (%v)", paused, waits)
	}
}

func TestProcess_WebhookOutageOf503sSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	rcv.Break(t) // 503 to every request
	// Five 5xx answers in a row open the circuit breaker.
	endureOutage(t, db, rcv, outage{url: rcv.URL, opening: 5, seen: true, end: rcv.Repair})
}

func TestProcess_WebhookOutageOf503sWithRetryAfterSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return http.StatusServiceUnavailable
	})
	// Ten answers asking to retry later, at least half of the recent
	// ones, pause the sink.
	endureOutage(t, db, rcv, outage{url: rcv.URL, opening: 10, seen: true, end: func() { rcv.RespondWith(nil) }})
}
