package rabbitmq

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Timings of the connection loop.
const (
	// reconnectMin is the pause before reconnecting after a connection
	// ends; it doubles with every failed attempt up to reconnectMax.
	reconnectMin = 250 * time.Millisecond
	reconnectMax = 15 * time.Second
	// dialTimeout bounds the TCP connect and the TLS and AMQP handshakes.
	dialTimeout = 10 * time.Second
	// heartbeat is the AMQP heartbeat interval: a dead peer is noticed
	// within about three of them.
	heartbeat = 10 * time.Second
	// closeTimeout bounds the close handshake.
	closeTimeout = 5 * time.Second
)

// connection is one AMQP connection and whether the broker blocks it.
type connection struct {
	amqp *amqp.Connection
	// frameMax is the largest frame the broker takes on this connection,
	// negotiated at connection.tune, in bytes; 0 for no limit. A message's
	// content header (its properties, the headers table included) must fit
	// in one frame: a larger one makes the broker close the connection.
	frameMax int
	// maxBody is the largest body the broker takes by default, from its
	// version, in bytes (see defaultMaxMessageSize).
	maxBody int64
	// blockedBy is the error Available reports while the broker has
	// blocked the connection (connection.blocked, from a memory or disk
	// alarm); nil otherwise.
	blockedBy atomic.Pointer[error]
}

// blocked returns nil, or an error wrapping sinks.ErrNotAttempted while the
// broker blocks the connection.
func (c *connection) blocked() error {
	if err := c.blockedBy.Load(); err != nil {
		return *err
	}
	return nil
}

// run connects, serves the connection until it ends, and reconnects with
// backoff, until Close.
func (s *Sink) run() {
	defer close(s.done)
	wait := time.Duration(0)
	for {
		if wait > 0 {
			select {
			case <-s.stop:
				return
			case <-time.After(jitter(wait)):
			}
		}
		select {
		case <-s.stop:
			return
		default:
		}
		conn, err := s.dial()
		if err != nil {
			err = s.scrub(err)
			s.lastDialErr.Store(&err)
			s.setDown(err)
			wait = min(max(2*wait, reconnectMin), reconnectMax)
			s.log.Warn("cannot connect to RabbitMQ; retrying", "err", err, "retry_in", wait)
			continue
		}
		s.lastDialErr.Store(nil)
		s.log.Info("connected to RabbitMQ", "exchange", s.cfg.Exchange)
		if s.serve(conn) {
			wait = reconnectMin
		} else {
			// Connected, but no channel: back off as after a failed dial.
			wait = min(max(2*wait, reconnectMin), reconnectMax)
		}
	}
}

// dial opens a connection.
func (s *Sink) dial() (*connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(s.cfg.ClientName)
	cfg := amqp.Config{
		Heartbeat:  heartbeat,
		Properties: props,
		Dial:       amqp.DefaultDial(dialTimeout),
		FrameSize:  s.cfg.frameSize,
	}
	if s.tls != nil {
		// amqp091 sets ServerName on the config it is given.
		cfg.TLSClientConfig = s.tls.Clone()
	}
	c, err := amqp.DialConfig(s.cfg.URL, cfg)
	if err != nil {
		return nil, err
	}
	version, _ := c.Properties["version"].(string)
	return &connection{amqp: c, frameMax: c.Config.FrameSize, maxBody: defaultMaxMessageSize(version)}, nil
}

// serve keeps a confirm-mode channel open on c, reopening it when the broker
// closes it (as it does after refusing a message), until c ends or the sink
// is closed. It reports whether it opened one.
func (s *Sink) serve(c *connection) (opened bool) {
	closed := c.amqp.NotifyClose(make(chan *amqp.Error, 1))
	blocks := c.amqp.NotifyBlocked(make(chan amqp.Blocking, 4))
	go s.watchBlocked(c, blocks)
	for {
		ss, err := s.openSession(c)
		if err != nil {
			if !c.amqp.IsClosed() {
				// The connection is up but will not give a channel:
				// start over.
				_ = c.amqp.CloseDeadline(time.Now().Add(closeTimeout))
			}
			s.lost(<-closed, fmt.Errorf("open channel: %w", err))
			return opened
		}
		opened = true
		s.sess.Store(ss)
		select {
		case <-ss.dead:
			// The session made itself unavailable as it ended.
			if !c.amqp.IsClosed() {
				s.log.Warn("RabbitMQ closed the channel; reopening it", "err", ss.deadErr)
			}
		case err := <-closed:
			s.lost(err, nil)
			s.sess.CompareAndSwap(ss, nil)
			return opened
		case <-s.stop:
			s.setDown(errors.New("the sink is closed"))
			s.sess.CompareAndSwap(ss, nil)
			_ = c.amqp.CloseDeadline(time.Now().Add(closeTimeout))
			return opened
		}
	}
}

// lost records and logs the end of a connection: reason is the broker's or
// the library's (nil when the sink closed it), or else fallback.
func (s *Sink) lost(reason *amqp.Error, fallback error) {
	var err error = reason
	if reason == nil {
		err = fallback
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	err = s.scrub(err)
	s.setDown(err)
	select {
	case <-s.stop:
	default:
		s.log.Warn("connection to RabbitMQ lost; reconnecting", "err", err)
	}
}

// watchBlocked follows connection.blocked and connection.unblocked for c
// until it closes.
func (s *Sink) watchBlocked(c *connection, blocks <-chan amqp.Blocking) {
	for b := range blocks {
		if !b.Active {
			c.blockedBy.Store(nil)
			s.log.Info("RabbitMQ unblocked the connection")
			continue
		}
		reason := cmp.Or(b.Reason, "no reason given")
		err := fmt.Errorf("%w: RabbitMQ blocked the connection (%s): a memory or disk alarm is on; publishing resumes when it clears", sinks.ErrNotAttempted, reason)
		c.blockedBy.Store(&err)
		s.log.Warn("RabbitMQ blocked the connection: a memory or disk alarm is on", "reason", reason)
	}
}

// openSession opens a channel in confirm mode on c and starts following
// its confirms and returns.
func (s *Sink) openSession(c *connection) (*session, error) {
	ch, err := c.amqp.Channel()
	if err != nil {
		return nil, err
	}
	// Unbuffered, and read by one goroutine: the library hands over a
	// message's return before its confirm, and that order is kept.
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation))
	returns := ch.NotifyReturn(make(chan amqp.Return))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	ss := newSession(s, c, ch)
	go ss.watch(confirms, returns, closes)
	return ss, nil
}

// scrub returns err, or a copy of its text without the URL's password when
// it shows up there.
func (s *Sink) scrub(err error) error {
	if err == nil || s.pass == "" || !strings.Contains(err.Error(), s.pass) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), s.pass, "redacted"))
}

// jitter returns d ± 20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
