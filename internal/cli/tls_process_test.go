package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/tlstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// readyz returns /readyz's status and body once the endpoint is up.
func (p *process) readyz() (int, string) {
	p.t.Helper()
	waitfor.Condition(p.t, 20*time.Second, "the HTTP endpoint", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.addr != ""
	})
	resp, err := http.Get("http://" + p.addr + "/readyz")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// logLines returns the process's log lines at level (JSON: INFO, WARN,
// ERROR) that contain s.
func (p *process) logLines(level, s string) []string {
	var out []string
	for _, l := range p.log() {
		if strings.Contains(l, `"level":"`+level+`"`) && strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// TestProcess_NATSOverTLSWithAnNKey runs the binary against a NATS server
// that requires TLS from a private CA and NKey authentication: with
// NATS_TLS_CA_FILE and the right NATS_NKEY_SEED_FILE rows are delivered;
// with a wrong seed nothing is, the refusal is logged once at error level
// however often the relay tries again, and /readyz answers 503 with it.
func TestProcess_NATSOverTLSWithAnNKey(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	relayPub, relaySeed := natstest.NKeyUser(t)
	testPub, testSeed := natstest.NKeyUser(t)
	_, wrongSeed := natstest.NKeyUser(t)
	testOpt, err := nats.NkeyOptionFromSeed(testSeed)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t, func(o *server.Options) {
		o.TLSConfig = ca.ServerConfig(ca.Issue(t, "127.0.0.1"), false)
		o.TLS = true
		o.TLSTimeout = 5
		o.Nkeys = []*server.NkeyUser{{Nkey: relayPub}, {Nkey: testPub}}
	})
	srv.SetClientOptions(nats.RootCAs(ca.CertFile), testOpt)
	srv.CreateStream(t, "EVENTS", "events.>")

	t.Run("RightSeed", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		const n = 200
		relaytest.InsertRows(t, db, n, "events.orders.created")
		p := startProcess(t, relayEnv(db, srv, "NATS_TLS_CA_FILE="+ca.CertFile, "NATS_NKEY_SEED_FILE="+relaySeed)...)
		relaytest.WaitDrained(t, db, relaytest.Budget(n))
		relaytest.AssertStreamMatchesArchive(t, db, srv, "EVENTS", n)
		if code, body := p.readyz(); code != http.StatusOK {
			t.Errorf("/readyz: %d %s, want 200", code, body)
		}
		if errs := p.logLines("ERROR", ""); len(errs) != 0 {
			t.Errorf("errors logged: %q", errs)
		}
	})

	t.Run("WrongSeed", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		const n = 20
		relaytest.InsertRows(t, db, n, "events.orders.created")
		before := srv.TotalConnections()
		p := startProcess(t, relayEnv(db, srv, "NATS_TLS_CA_FILE="+ca.CertFile, "NATS_NKEY_SEED_FILE="+wrongSeed)...)
		p.waitLog("authorization violation")
		// Several more attempts (the other subtest connects once).
		waitfor.Condition(t, 30*time.Second, "the relay to try again several times", func() bool {
			return srv.TotalConnections() >= before+6
		})
		// One line from the sink with the server's reason, one from the
		// relay saying its rows wait: each once, however many retries.
		if got := p.logLines("ERROR", "NATS refused the connection"); len(got) != 1 {
			t.Errorf("%d error lines from the sink naming the refusal, want 1: %q", len(got), got)
		}
		if got := p.logLines("ERROR", "sink unavailable"); len(got) != 1 {
			t.Errorf("%d error lines from the relay saying the sink is unavailable, want 1: %q", len(got), got)
		}
		code, body := p.readyz()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "sink nats: ") || !strings.Contains(body, "not connected to NATS: authorization violation") {
			t.Errorf("/readyz: %d %q, want 503 naming the refusal", code, body)
		}
		seed := strings.TrimSpace(readFile(t, wrongSeed))
		if strings.Contains(strings.Join(p.log(), "\n"), seed) || strings.Contains(body, seed) {
			t.Error("the seed was logged")
		}
		var left, attempts int
		if err := db.Pool.QueryRow(context.Background(), "SELECT count(*), coalesce(sum(attempts), 0) FROM "+db.Table("messages")).Scan(&left, &attempts); err != nil {
			t.Fatal(err)
		}
		if left != n || attempts != 0 || db.Count(t, "dead_letters") != 0 {
			t.Errorf("%d rows left, %d attempts spent, %d dead letters; want all %d rows waiting, untouched", left, attempts, db.Count(t, "dead_letters"), n)
		}
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestProcess_WebhookWithAPrivateCAAndAClientCertificate runs the binary
// against an https endpoint whose certificate a private CA signed and which
// requires a client certificate: WEBHOOK_TLS_* get the rows through.
func TestProcess_WebhookWithAPrivateCAAndAClientCertificate(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	client := ca.Issue(t)
	rcv := webhooktest.NewTLSReceiver(t, ca.ServerConfig(ca.Issue(t, "127.0.0.1"), true))
	db := dbtest.New(t)
	const n = 30
	relaytest.InsertRows(t, db, n, "orders.created")
	p := startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name,
		"WEBHOOK_URL="+rcv.URL, "WEBHOOK_SECRET="+rcv.Secret,
		"WEBHOOK_TLS_CA_FILE="+ca.CertFile, "WEBHOOK_TLS_CERT_FILE="+client.CertFile, "WEBHOOK_TLS_KEY_FILE="+client.KeyFile)
	relaytest.WaitDrained(t, db, relaytest.Budget(n))
	if got := len(rcv.Accepted()); got != n {
		t.Errorf("the endpoint accepted %d messages, want %d", got, n)
	}
	if errs := p.logLines("ERROR", ""); len(errs) != 0 {
		t.Errorf("errors logged: %q", errs)
	}
}
