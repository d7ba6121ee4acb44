package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// client is one NATS connection with its JetStream context. The client
// reconnects by itself after a connection is lost, but gives up for good
// when the server answers with an error it does not know how to recover
// from (a protocol line over the server's max_control_line, for one): the
// sink then makes a new client (renew), so that a connection never stays
// dead behind a healthy relay.
type client struct {
	nc     *nats.Conn
	js     jetstream.JetStream // nil for core NATS
	status chan nats.Status    // the watcher's status events
	// gone is closed when the client closed for good (not by Close).
	gone     chan struct{}
	goneOnce sync.Once
}

// isGone reports whether c's connection is closed for good. It reads the
// connection's state, which changes before the closed handler runs (gone).
func (c *client) isGone() bool {
	return c.nc.IsClosed()
}

// errClientGone is the failure of a message whose client closed for good
// before the server acknowledged it.
var errClientGone = errors.New("the NATS client closed the connection for good")

// Renewal waits: the first new client is made renewWaitMin after the old
// one closed, and each further one in a row waits twice as long, up to
// renewWaitMax.
const (
	renewWaitMin = 250 * time.Millisecond
	renewWaitMax = 30 * time.Second
)

// dial makes a client with the sink's options. With RetryOnFailedConnect
// it does not wait for the server.
func (s *Sink) dial() (*client, error) {
	nc, err := nats.Connect(s.cfg.URL, s.opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", Redact(s.cfg.URL), err)
	}
	c := &client{nc: nc, status: nc.StatusChanged(nats.CONNECTING, nats.RECONNECTING, nats.CONNECTED, nats.CLOSED), gone: make(chan struct{})}
	go s.watch(nc, c.status)
	if s.cfg.JetStream {
		js, err := jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(s.cfg.MaxPending),
			jetstream.WithPublishAsyncTimeout(s.cfg.AckTimeout),
		)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("open JetStream: %w", err)
		}
		c.js = js
	}
	return c, nil
}

// close closes the connection and stops its watcher.
func (c *client) close() {
	c.nc.Close()
	c.nc.RemoveStatusListener(c.status)
}

// clientClosed is the client's ClosedHandler: unless the sink is closing,
// it records why and makes a new client in the background.
func (s *Sink) clientClosed(nc *nats.Conn) {
	if s.closing.Load() {
		return
	}
	cur := s.conn.Load()
	if cur == nil || cur.nc != nc {
		return // a client already replaced
	}
	cur.goneOnce.Do(func() { close(cur.gone) })
	s.state.closed(nc.LastError())
	go s.renew(nc)
}

// renew replaces the closed client old with a new one, waiting
// renewWaitMin first and longer after each failure, until it succeeds or
// the sink is closed.
func (s *Sink) renew(old *nats.Conn) {
	wait := renewWaitMin
	for {
		t := time.NewTimer(wait)
		select {
		case <-s.done:
			t.Stop()
			return
		case <-t.C:
		}
		c, err := s.dial()
		if err != nil {
			s.log.Error("cannot make a new NATS client; retrying", "err", err, "retry_in", wait)
			wait = min(2*wait, renewWaitMax)
			continue
		}
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			c.close()
			return
		}
		prev := s.conn.Swap(c)
		s.mu.Unlock()
		if prev != nil && prev.nc == old {
			prev.nc.RemoveStatusListener(prev.status)
		}
		s.renewals.Add(1)
		s.log.Info("made a new NATS client to replace the closed one")
		return
	}
}

// Renewals returns how many times the sink replaced a client that had
// closed for good.
func (s *Sink) Renewals() int64 { return s.renewals.Load() }

// isolate sends again, one at a time, the messages of msgs that failed
// because client old closed for good (errs holds their outcomes), each on
// the client that replaced it, and sets their outcomes: a message whose
// publish alone closes the new client too is refused as permanent, since
// sending it again would close the connection again, for every message in
// flight. Isolations take turns (isolateMu), so that a message sent alone
// is not blamed for another batch's.
func (s *Sink) isolate(ctx context.Context, old *client, msgs []sinks.Message, errs []error) {
	s.isolateMu.Lock()
	defer s.isolateMu.Unlock()
	for i := range msgs {
		if !closedUnder(errs[i]) {
			continue
		}
		c := s.awaitNewClient(ctx, old)
		if c == nil {
			return // out of time: the rest stay transient
		}
		one := s.deliverOn(ctx, c, msgs[i:i+1], make([]error, 1))
		if c.isGone() && closedUnder(one[0]) {
			reason := "no reason given"
			if err := c.nc.LastError(); err != nil {
				reason = describe(err)
			}
			errs[i] = sinks.Permanent(fmt.Errorf("the NATS server closed the connection when this message was published alone (%s): sending it again would close it again", reason))
			old = c
			continue
		}
		errs[i] = one[0]
	}
}

// closedUnder reports whether err is a message lost with its client.
func closedUnder(err error) bool {
	return err != nil && !sinks.IsPermanent(err) && (errors.Is(err, errClientGone) || errors.Is(err, nats.ErrConnectionClosed))
}

// awaitNewClient waits until a client other than old is connected and
// returns it, or nil when ctx ends or the sink closes first.
func (s *Sink) awaitNewClient(ctx context.Context, old *client) *client {
	for {
		if c := s.conn.Load(); c != old && c.nc.IsConnected() {
			return c
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.done:
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
