package nats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// connState follows the connection for Available and for the log: whether
// it is up and, when it is not, why the last attempt failed.
//
// The client retries forever, so a failure repeats at every attempt; it is
// logged once per reason instead: when it first happens, again only when
// the reason changes to one not yet logged since the last connection (a
// server that alternates between two reasons gets each logged once), and
// the recovery at info. A failure the operator must fix (the server refused
// the credentials, TLS failed, a credentials file cannot be read) is logged
// at error level, others (connection refused, a dropped connection) at
// warn.
type connState struct {
	log *slog.Logger
	// down holds Available's error; nil while connected. Callbacks change
	// it in the client's order; a failure seen by the status watcher may
	// arrive late, so it only replaces an error, never a connection (see
	// failed).
	down atomic.Pointer[error]
	// shut is set by the sink's Close: later events change nothing.
	shut atomic.Bool

	mu        sync.Mutex
	logged    map[string]bool // the failures logged since the last connection
	reasons   []string        // the same, in the order they were logged
	loggedTLS bool            // one of them was a failed TLS handshake
	asyncLast string          // the last server error logged while connected
}

func newConnState(log *slog.Logger) *connState {
	c := &connState{log: log}
	err := errNotConnected
	c.down.Store(&err)
	return c
}

// available returns nil while connected, else why not.
func (c *connState) available() error {
	if p := c.down.Load(); p != nil {
		return *p
	}
	return nil
}

// up records a connection and logs it (msg), with the failures it ends
// (each logged one, oldest first).
func (c *connState) up(msg string) {
	if c.shut.Load() {
		return // a callback queued before Close
	}
	c.down.Store(nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reasons) > 0 {
		c.log.Info(msg, "after", strings.Join(c.reasons, "; "))
	} else {
		c.log.Info(msg)
	}
	c.logged, c.reasons, c.loggedTLS, c.asyncLast = nil, nil, false, ""
}

// disconnected records a connection lost because of err.
func (c *connState) disconnected(err error) {
	reason := describe(err)
	c.setDown(reason)
	c.report(err, reason, "disconnected from NATS; reconnecting")
}

// failed records an attempt to connect that failed with err. It changes
// Available's error only while not connected: a late report of an attempt
// that came before the connection must not hide it.
func (c *connState) failed(err error) {
	if c.vagueAfterTLSFailure(err) {
		return
	}
	reason := describe(err)
	for {
		old := c.down.Load()
		if old == nil || c.shut.Load() {
			return // connected or closed since: the report is stale
		}
		e := fmt.Errorf("%w: %s", errNotConnected, reason)
		if c.down.CompareAndSwap(old, &e) {
			break
		}
	}
	c.report(err, reason, "cannot connect to NATS; retrying")
}

// closed records that the client gave up for good, with its last error:
// the sink makes a new one (renew).
func (c *connState) closed(err error) {
	reason := "connection closed"
	if err != nil {
		reason += ": " + describe(err)
	}
	c.setDown(reason)
	c.log.Error("the NATS client closed the connection for good; connecting again with a new client", "err", reason)
}

// serverError records an error the server reported outside of connecting:
// a refusal (credentials expired or revoked) belongs to the connection, a
// permissions violation is logged at error once per change, others at warn.
func (c *connState) serverError(err error) {
	if loud(err) {
		c.report(err, describe(err), "cannot connect to NATS; retrying")
		return
	}
	reason := describe(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if reason == c.asyncLast {
		return
	}
	c.asyncLast = reason
	if errors.Is(err, nats.ErrPermissionViolation) {
		c.log.Error("NATS refused a publish: the relay's user may not publish to the subject; grant it", "err", reason)
		return
	}
	c.log.Warn("NATS error", "err", reason)
}

// close records that the sink was closed.
func (c *connState) close() {
	c.shut.Store(true)
	e := fmt.Errorf("%w: the sink is closed", errNotConnected)
	c.down.Store(&e)
}

func (c *connState) setDown(reason string) {
	if c.shut.Load() {
		return
	}
	e := fmt.Errorf("%w: %s", errNotConnected, reason)
	c.down.Store(&e)
}

// vagueAfterTLSFailure reports whether err is a connection the server
// closed right after the TLS handshake, without saying why, following a
// failed handshake. With TLS 1.3 a server refuses a client certificate
// after the client has finished its side of the handshake, so the client
// sees either the server's alert (certificate required) or, when its write
// races with the close, only a broken pipe: the same failure, told less
// well, which must neither be logged again nor hide the alert.
func (c *connState) vagueAfterTLSFailure(err error) bool {
	if !errors.Is(err, nats.ErrTLS) || !(errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loggedTLS
}

// maxLogged bounds the reasons remembered since the last connection; past
// it they are forgotten, and may be logged again.
const maxLogged = 16

// report logs a failure unless its reason was logged since the last
// connection.
func (c *connState) report(err error, reason, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logged[reason] {
		return
	}
	if c.logged == nil || len(c.logged) >= maxLogged {
		c.logged, c.reasons = map[string]bool{}, nil
	}
	c.logged[reason] = true
	c.reasons = append(c.reasons, reason)
	if errors.Is(err, nats.ErrTLS) || sinks.TLSFailure(err) != nil {
		c.loggedTLS = true
	}
	level := slog.LevelWarn
	switch {
	case refusal(err) != "":
		level, msg = slog.LevelError, "NATS refused the connection: check the credentials (NATS_CREDS_FILE, NATS_NKEY_SEED_FILE, NATS_URL) and the server's accounts; retrying"
	case loud(err):
		level, msg = slog.LevelError, "cannot connect to NATS: TLS failed or a credentials file cannot be read (check NATS_TLS_*, NATS_CREDS_FILE, NATS_NKEY_SEED_FILE and the server's TLS); retrying"
	}
	c.log.Log(context.Background(), level, msg, "err", reason)
}

// refusals are the server's reasons for refusing a connection, as nats.go
// recognises them.
var refusals = []struct {
	err    error
	reason string // the server's text, lower-cased
}{
	{nats.ErrAuthorization, nats.AUTHORIZATION_ERR},
	{nats.ErrAuthExpired, nats.AUTHENTICATION_EXPIRED_ERR},
	{nats.ErrAuthRevoked, nats.AUTHENTICATION_REVOKED_ERR},
	{nats.ErrAccountAuthExpired, nats.ACCOUNT_AUTHENTICATION_EXPIRED_ERR},
}

// refusal returns the server's reason when err is a refused connection,
// else "". The client reports one refusal in two forms (a sentinel error
// to the error handler, the server's -ERR text from the connect attempt):
// both give the same reason, so that it is logged once.
func refusal(err error) string {
	for _, r := range refusals {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	msg := strings.ToLower(strings.TrimPrefix(err.Error(), "nats: "))
	for _, r := range refusals {
		if strings.HasPrefix(msg, r.reason) {
			return r.reason
		}
	}
	return ""
}

// describe returns err as a reason for the log and for Available. A
// socket error loses its local address, whose port changes at every
// attempt, so that the same failure reads the same each time.
func describe(err error) string {
	if r := refusal(err); r != "" {
		return r
	}
	if f := sinks.TLSFailure(err); f != nil {
		return f.Error()
	}
	msg := strings.TrimPrefix(err.Error(), "nats: ")
	var op *net.OpError
	if errors.As(err, &op) && op.Source != nil {
		remote := *op
		remote.Source = nil
		msg = strings.Replace(msg, op.Error(), remote.Error(), 1)
	}
	return msg
}

// loud reports whether err is a failure the operator must fix: a refusal
// by the server, a failed TLS handshake or a TLS or credentials file that
// cannot be read.
func loud(err error) bool {
	var pathErr *fs.PathError
	switch {
	case refusal(err) != "",
		errors.Is(err, nats.ErrTLS),
		errors.Is(err, nats.ErrSecureConnWanted),
		errors.Is(err, nats.ErrSecureConnRequired),
		errors.Is(err, errTLSFiles),
		sinks.TLSFailure(err) != nil,
		errors.As(err, &pathErr):
		return true
	}
	return false
}

// watch follows the connection's status until ch is closed, to catch the
// attempts that fail after the TCP connection is made (a refused
// handshake): the client reports those through no callback, only as its
// last error when it goes back from CONNECTING to RECONNECTING.
func (s *Sink) watch(nc *nats.Conn, ch chan nats.Status) {
	connecting := false
	for st := range ch {
		switch st {
		case nats.CONNECTING:
			connecting = true
			continue
		case nats.RECONNECTING:
			if connecting {
				if err := nc.LastError(); err != nil {
					s.state.failed(err)
				}
			}
		}
		connecting = false
	}
}
