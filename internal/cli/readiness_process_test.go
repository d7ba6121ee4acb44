package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
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

// /readyz answers anyone who reaches the port: when PostgreSQL refuses the
// relay, it says so with the SQLSTATE and names neither the database, nor
// its host and port, nor the role (PostgreSQL's own message names them:
// `database "…" does not exist`, `role "…" is not permitted to log in`).
func TestProcess_ReadyzNamesNoDatabaseHostOrRole(t *testing.T) {
	t.Parallel()
	superuser := func(t *testing.T, sql string, args ...any) {
		t.Helper()
		conn, err := pgx.Connect(context.Background(), dbtest.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// readyz waits until /readyz answers code with a body containing want.
	readyz := func(t *testing.T, p *process, code int, want string) string {
		t.Helper()
		p.metrics() // waits for the endpoint
		var body string
		waitfor.Condition(t, 30*time.Second, fmt.Sprintf("/readyz to answer %d with %q", code, want), func() bool {
			var got int
			got, body = get(t, "http://"+p.addr+"/readyz")
			return got == code && strings.Contains(body, want)
		})
		return body
	}
	// named fails t when body shows a part of the connection string.
	named := func(t *testing.T, body, databaseURL string) {
		t.Helper()
		cfg, err := pgconn.ParseConfig(databaseURL)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{cfg.Database, cfg.User, cfg.Host, ":" + strconv.Itoa(int(cfg.Port)), "user=", "database=", "127.0.0.1", "localhost"} {
			if strings.Contains(body, s) {
				t.Errorf("/readyz shows %q: %q", s, body)
			}
		}
	}
	webhook := func(t *testing.T) []string {
		rcv := webhooktest.NewReceiver(t)
		return []string{"WEBHOOK_URL=" + rcv.URL, "WEBHOOK_SECRET=" + rcv.Secret}
	}

	t.Run("the database is dropped", func(t *testing.T) {
		t.Parallel()
		databaseURL := dbtest.NewDatabase(t)
		cfg, err := pgconn.ParseConfig(databaseURL)
		if err != nil {
			t.Fatal(err)
		}
		p := startProcess(t, append(webhook(t), "DATABASE_URL="+databaseURL)...)
		readyz(t, p, http.StatusOK, "ok")
		superuser(t, "DROP DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()+" WITH (FORCE)")
		body := readyz(t, p, http.StatusServiceUnavailable, "SQLSTATE 3D000")
		t.Logf("/readyz: %s", body)
		named(t, body, databaseURL)
	})
	t.Run("the role may no longer log in", func(t *testing.T) {
		t.Parallel()
		lp := dbtest.NewLeastPrivilege(t)
		p := startProcess(t, append(webhook(t), "DATABASE_URL="+lp.Relay.URL, "RELAY_SCHEMA="+lp.Name, "RELAY_MIGRATE=false")...)
		readyz(t, p, http.StatusOK, "ok")
		superuser(t, "ALTER ROLE "+pgx.Identifier{lp.Relay.Name}.Sanitize()+" NOLOGIN")
		superuser(t, "SELECT pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usename = $1", lp.Relay.Name)
		body := readyz(t, p, http.StatusServiceUnavailable, "SQLSTATE 28000")
		t.Logf("/readyz: %s", body)
		named(t, body, lp.Relay.URL)
	})
	t.Run("the database never existed", func(t *testing.T) {
		t.Parallel()
		cfg, err := pgconn.ParseConfig(dbtest.URL())
		if err != nil {
			t.Fatal(err)
		}
		databaseURL := fmt.Sprintf("postgres://%s@%s/t_no_such_database?sslmode=disable", cfg.User, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
		p := startProcess(t, append(webhook(t), "DATABASE_URL="+databaseURL)...)
		p.waitLog("cannot reach the database")
		body := readyz(t, p, http.StatusServiceUnavailable, "waiting for the database")
		t.Logf("/readyz: %s", body)
		named(t, body, databaseURL)
	})
}
