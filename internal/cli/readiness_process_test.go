package cli

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/webhooktest"
)

// While every webhook request is refused (nothing listens), the circuit
// breaker pauses the sink, then lets a request through, which fails, and
// pauses it again: /readyz stays 503 throughout, not 200 between the
// pauses; once the endpoint answers, the rows go out and /readyz is 200.
func TestProcess_ReadyzDoesNotFlapBetweenBreakerPauses(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	// The endpoint answers no request until the end of the test: every
	// connection is closed at once. The test holds the address all along
	// (a closed port may be taken by a parallel test's server).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	refusing := make(chan struct{})
	go func() {
		defer close(refusing)
		for {
			c, err := l.Accept()
			if err != nil {
				return // the listener is handed to the server below
			}
			c.Close()
		}
	}()

	p := startProcess(t,
		"DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name,
		"WEBHOOK_URL=http://"+addr+webhooktest.Path, "WEBHOOK_SECRET="+rcv.Secret, "WEBHOOK_TIMEOUT=2s")
	relaytest.InsertRows(t, db, 20, "orders.created")
	get := func() (int, string) {
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	readyz := func() int {
		code, _ := get()
		return code
	}
	// Not any 503: while it starts, the relay answers 503 too, and then,
	// before its first request fails, 200 (nothing tells it yet that the
	// endpoint is dead).
	waitfor.Condition(t, 30*time.Second, "/readyz to report the refused endpoint", func() bool {
		p.metrics() // waits for the endpoint
		code, body := get()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "sink webhook")
	})
	// The breaker pauses for 1s, 2s, 4s, 8s: 15s see four of its openings.
	var oks int
	var first, last time.Time
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if readyz() == http.StatusOK {
			if oks == 0 {
				first = time.Now()
			}
			oks++
			last = time.Now()
		}
	}
	if oks > 0 {
		t.Errorf("/readyz answered 200 %d times while every delivery was refused, from %s to %s",
			oks, first.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
	}
	if n := db.Count(t, "archive"); n != 0 {
		t.Fatalf("%d rows archived while nothing listened", n)
	}

	// The endpoint comes up on the same address.
	_ = l.(*net.TCPListener).SetDeadline(time.Now()) // ends the refusing loop's Accept
	<-refusing
	_ = l.(*net.TCPListener).SetDeadline(time.Time{})
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: rcv}}
	srv.Start()
	t.Cleanup(srv.Close)
	relaytest.WaitDrained(t, db, 60*time.Second)
	waitfor.Condition(t, 10*time.Second, "/readyz to be 200 again", func() bool { return readyz() == http.StatusOK })
}
