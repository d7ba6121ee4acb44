package nats

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

func newTestState() (*connState, *bytes.Buffer) {
	var logs bytes.Buffer
	return newConnState(slog.New(slog.NewTextHandler(&logs, nil))), &logs
}

func count(logs *bytes.Buffer, level, s string) int {
	n := 0
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, "level="+level) && strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func TestConnState_EachReasonOncePerOutage(t *testing.T) {
	c, logs := newTestState()
	refused := errors.New("nats: Authorization Violation") // the -ERR text
	timeout := errors.New("nats: authentication timeout")
	for range 3 {
		c.failed(refused)
		c.serverError(nats.ErrAuthorization) // the same refusal, as the error handler gets it
		c.failed(timeout)
	}
	if n := count(logs, "ERROR", `err="authorization violation"`); n != 1 {
		t.Errorf("the refusal was logged %d times at error, want 1:\n%s", n, logs)
	}
	if n := count(logs, "WARN", "authentication timeout"); n != 1 {
		t.Errorf("the timeout was logged %d times at warn, want 1:\n%s", n, logs)
	}
	if err := c.available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.HasSuffix(err.Error(), "not connected to NATS: authentication timeout") {
		t.Errorf("available = %v, want the last reason", err)
	}

	c.up("reconnected to NATS")
	if err := c.available(); err != nil {
		t.Errorf("available after up = %v", err)
	}
	if n := count(logs, "INFO", `after="authorization violation; authentication timeout"`); n != 1 {
		t.Errorf("recovery not logged with the failures it ends, oldest first:\n%s", logs)
	}
	// A failure reported late, after the connection, is stale.
	c.failed(refused)
	if err := c.available(); err != nil {
		t.Errorf("a stale failure hid the connection: %v", err)
	}
	// A new outage logs again.
	c.disconnected(errors.New("EOF"))
	c.failed(refused)
	if n := count(logs, "ERROR", `err="authorization violation"`); n != 2 {
		t.Errorf("the refusal of a new outage was logged %d times in all, want 2:\n%s", n, logs)
	}
}

func TestConnState_AVagueCloseDoesNotHideTheAlert(t *testing.T) {
	c, logs := newTestState()
	alert := &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}
	for port := range 3 {
		c.failed(alert)
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000 + port}
		dst := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4222}
		c.failed(fmt.Errorf("%w: connection closed by remote after TLS handshake: %w", nats.ErrTLS,
			&net.OpError{Op: "write", Net: "tcp", Source: src, Addr: dst, Err: syscall.EPIPE}))
	}
	if n := count(logs, "ERROR", ""); n != 1 {
		t.Errorf("%d error lines, want 1:\n%s", n, logs)
	}
	if err := c.available(); err == nil || !strings.Contains(err.Error(), "tls: certificate required") {
		t.Errorf("available = %v, want the alert", err)
	}
}

func TestDescribe_DropsTheLocalAddress(t *testing.T) {
	src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40123}
	dst := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4222}
	err := fmt.Errorf("nats: flush: %w", &net.OpError{Op: "read", Net: "tcp", Source: src, Addr: dst, Err: syscall.ECONNRESET})
	if got, want := describe(err), "flush: read tcp 127.0.0.1:4222: connection reset by peer"; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
}

func TestConnState_ClosedStaysClosed(t *testing.T) {
	c, _ := newTestState()
	c.close()
	c.up("connected to NATS") // queued before Close
	c.failed(errors.New("EOF"))
	if err := c.available(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("available after close = %v", err)
	}
}
