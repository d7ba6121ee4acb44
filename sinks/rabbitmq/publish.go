package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// publish is one message on its way: made by prepare, sent by publishAll,
// settled by its confirm (or return and confirm), or by the end of its
// channel.
type publish struct {
	key string // routing key
	msg amqp.Publishing
	// state says who owns the message before it is sent: publishAll, which
	// takes it (statePending → stateSending), or Deliver, which gives up
	// on it when its context ends first (statePending → stateAbandoned)
	// and reports it not attempted.
	state atomic.Int32
	done  chan struct{}
	err   error // the outcome, set before done is closed

	// Guarded by the session's mu once registered.
	tag      uint64
	returned error // an *UnroutableError when the broker returned it
	unsent   bool  // the channel was closed when it was to be published
}

const (
	statePending int32 = iota
	stateSending
	stateAbandoned
)

// settle sets the outcome. Exactly one party settles a message: publishAll
// while it is not registered, the session (under mu) once it is.
func (p *publish) settle(err error) {
	p.err = err
	close(p.done)
}

// session is one channel in confirm mode and the messages published on it
// that await their confirm.
type session struct {
	sink *Sink
	conn *connection
	ch   *amqp.Channel
	// slot is held while publishing: delivery tags are predicted under it
	// (GetNextPublishSeqNo), so nothing else may publish meanwhile.
	slot chan struct{}

	mu sync.Mutex
	// pending holds the unconfirmed messages by delivery tag, byID the
	// same by message_id, oldest first, to match returns with.
	pending map[uint64]*publish
	byID    map[string][]*publish
	// abortErr, when set, is why the sink closed the channel itself.
	abortErr error
	// deadErr is why the channel ended; set when dead is closed.
	deadErr error
	dead    chan struct{}
}

func newSession(s *Sink, c *connection, ch *amqp.Channel) *session {
	return &session{
		sink:    s,
		conn:    c,
		ch:      ch,
		slot:    make(chan struct{}, 1),
		pending: map[uint64]*publish{},
		byID:    map[string][]*publish{},
		dead:    make(chan struct{}),
	}
}

// publishAll publishes pubs in order, mandatory, registering each under
// the delivery tag it will get. It stops publishing when ctx ends, the
// broker blocks the connection or the channel ends; what it did not send is
// settled as not attempted.
func (ss *session) publishAll(ctx context.Context, pubs []*publish) {
	select {
	case ss.slot <- struct{}{}:
	case <-ctx.Done():
		return // Deliver reports what was not taken
	case <-ss.dead:
		for _, p := range pubs {
			if p.state.CompareAndSwap(statePending, stateSending) {
				p.settle(ss.notAttempted())
			}
		}
		return
	}
	defer func() { <-ss.slot }()
	for _, p := range pubs {
		if !p.state.CompareAndSwap(statePending, stateSending) {
			continue // Deliver gave up on it and reported it
		}
		if err := ctx.Err(); err != nil {
			p.settle(fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err))
			continue
		}
		if err := ss.conn.blocked(); err != nil {
			p.settle(err)
			continue
		}
		tag := ss.ch.GetNextPublishSeqNo()
		if !ss.register(tag, p) {
			p.settle(ss.notAttempted())
			continue
		}
		dc, err := ss.ch.PublishWithDeferredConfirm(ss.sink.cfg.Exchange, p.key, true, false, p.msg)
		if errors.Is(err, amqp.ErrClosed) {
			// Refused before any byte was written, because the channel
			// is closing: the end of the channel, which is on its way,
			// settles the message with the broker's reason.
			ss.markUnsent(p)
			continue
		}
		if err != nil {
			ss.unregister(p, fmt.Errorf("publish: %w", err))
			continue
		}
		if dc != nil && dc.DeliveryTag != tag {
			// Cannot happen while only publishAll publishes, under slot.
			// Confirms could no longer be matched with messages: end the
			// channel, which fails every message awaiting one.
			ss.abort(fmt.Errorf("delivery tag %d where %d was expected: confirms cannot be matched with messages", dc.DeliveryTag, tag))
		}
	}
}

// await waits for p's outcome until ctx ends.
func (ss *session) await(ctx context.Context, p *publish) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
	}
	if p.state.CompareAndSwap(statePending, stateAbandoned) {
		return fmt.Errorf("%w: %w", sinks.ErrNotAttempted, ctx.Err())
	}
	select {
	case <-p.done:
		return p.err
	default:
	}
	if blocked := ss.conn.blocked(); blocked != nil {
		return fmt.Errorf("await publisher confirm: %w; %s", ctx.Err(), errors.Unwrap(blocked))
	}
	select {
	case <-ss.dead:
		// The channel ended without settling the message (seen once: a
		// publish racing the broker's close of the channel); its end
		// says why, which is what an operator needs to read.
		return fmt.Errorf("await publisher confirm: %w; the channel closed: %w", ctx.Err(), ss.deadErr)
	default:
	}
	return fmt.Errorf("await publisher confirm: %w", ctx.Err())
}

// register records p as published under tag, unless the channel has ended.
func (ss *session) register(tag uint64, p *publish) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.deadErr != nil {
		return false
	}
	p.tag = tag
	ss.pending[tag] = p
	ss.byID[p.msg.MessageId] = append(ss.byID[p.msg.MessageId], p)
	return true
}

// unregister settles p with err, unless the end of the channel already did.
func (ss *session) unregister(p *publish, err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.pending[p.tag] != p {
		return
	}
	ss.forget(p)
	p.settle(err)
}

// markUnsent records that p was not sent, unless the end of the channel
// already settled it.
func (ss *session) markUnsent(p *publish) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.pending[p.tag] == p {
		p.unsent = true
	}
}

// forget removes p from pending and byID; mu is held.
func (ss *session) forget(p *publish) {
	delete(ss.pending, p.tag)
	id := p.msg.MessageId
	list := slices.DeleteFunc(ss.byID[id], func(q *publish) bool { return q == p })
	if len(list) == 0 {
		delete(ss.byID, id)
	} else {
		ss.byID[id] = list
	}
}

// watch settles messages as their confirms and returns arrive, until the
// channel ends; then it fails those left. Both notification channels are
// unbuffered and read here alone: the library hands over a message's
// return before its confirm, so a returned message is known as such when
// its confirm comes.
func (ss *session) watch(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, closes <-chan *amqp.Error) {
	for confirms != nil || returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			ss.onReturn(&r)
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			ss.onConfirm(c)
		}
	}
	ss.end(<-closes)
}

// onReturn marks the oldest unconfirmed, unreturned message with r's
// message_id as returned: unroutable.
func (ss *session) onReturn(r *amqp.Return) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, p := range ss.byID[r.MessageId] {
		if p.returned == nil {
			p.returned = &UnroutableError{Exchange: r.Exchange, RoutingKey: r.RoutingKey, Code: r.ReplyCode, Text: r.ReplyText}
			return
		}
	}
	ss.sink.log.Debug("RabbitMQ returned a message the sink does not await", "message_id", r.MessageId)
}

// onConfirm settles the message c confirms.
func (ss *session) onConfirm(c amqp.Confirmation) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	p := ss.pending[c.DeliveryTag]
	if p == nil {
		return
	}
	ss.forget(p)
	switch {
	case p.returned != nil:
		p.settle(p.returned)
	case !c.Ack:
		p.settle(ErrNacked)
	default:
		p.settle(nil)
	}
}

// end fails every message still awaiting a confirm, now that the channel is
// gone: reason is the broker's (nil when the sink closed the channel). A
// message the broker refused as too large is a permanent failure; the others
// are transient.
func (ss *session) end(reason *amqp.Error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var err error
	switch {
	case reason != nil:
		err = ss.sink.scrub(reason)
	case ss.abortErr != nil:
		err = ss.abortErr
	default:
		err = errors.New("channel closed")
	}
	// Unavailable from now on, before any outcome below is seen.
	ss.sink.setDown(fmt.Errorf("channel closed: %w", err))
	ss.sink.sess.CompareAndSwap(ss, nil)
	culprit, tooLarge := ss.sink.oversized(reason, ss.pending)
	for _, p := range ss.pending {
		switch {
		case p == culprit:
			p.settle(tooLarge)
		case p.returned != nil:
			p.settle(p.returned)
		case p.unsent:
			p.settle(fmt.Errorf("%w: the channel closed: %w", sinks.ErrNotAttempted, err))
		default:
			p.settle(fmt.Errorf("the channel closed before RabbitMQ confirmed the message: %w", err))
		}
	}
	ss.pending, ss.byID = nil, nil
	ss.deadErr = err
	close(ss.dead)
}

// abort closes the channel because of err, failing what awaits a confirm.
func (ss *session) abort(err error) {
	ss.mu.Lock()
	if ss.abortErr == nil {
		ss.abortErr = err
	}
	ss.mu.Unlock()
	ss.sink.log.Error("closing the RabbitMQ channel", "err", err)
	_ = ss.ch.Close()
}

// notAttempted is the outcome of a message that was not sent because the
// channel had ended.
func (ss *session) notAttempted() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return fmt.Errorf("%w: the channel closed: %w", sinks.ErrNotAttempted, ss.deadErr)
}
