package listener

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// probeTimeout is how long the relay waits for its own probe
// notification before concluding that notifications cannot arrive.
const probeTimeout = 3 * time.Second

// Channel is the channel schema's trigger notifies (migration
// 005_notify.sql).
func Channel(schema string) string {
	sum := md5.Sum([]byte(schema))
	return "outbox_relay_" + hex.EncodeToString(sum[:])[:16]
}

// Broadcast wakes every waiter at once: Wait returns a channel that the
// next Wake closes.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// NewBroadcast returns a broadcast nobody waits on yet.
func NewBroadcast() *Broadcast { return &Broadcast{ch: make(chan struct{})} }

// Wait returns the channel the next Wake closes.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// Wake wakes every waiter.
func (b *Broadcast) Wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// Listener is one database's listening connection (RELAY_NOTIFY): it
// LISTENs on the channel of every schema whose relay subscribed, and wakes
// that relay's claim loops on each notification. Relays on several schemas
// of one database share one (relay.Config.Listener); a relay without one
// runs its own.
type Listener struct {
	cfg Config
	// probe is this listener's own payload on probeChannel.
	probe string

	mu sync.Mutex
	// subs wakes, by channel, the relay of each subscribed schema; changed
	// tells the connection to LISTEN to (or UNLISTEN from) its channels.
	subs    map[string]*subscription
	changed chan struct{}
	// ok is set while the connection listens and its probe came back.
	ok atomic.Bool
}

// subscription is a schema's relay's: the broadcast that wakes its claim
// loops.
type subscription struct {
	schema string
	b      *Broadcast
}

// probeChannel carries listeners' probes: a notification sent through
// another connection must come back on the listening one.
const probeChannel = "outbox_relay_probe"

// listenWait is how long the listening connection waits for a notification
// before it looks for new subscriptions.
const listenWait = time.Second

// Config configures a Listener.
type Config struct {
	// Pool reaches the database: the listener takes one of its connections
	// for itself, and sends its probe through another.
	Pool *pgxpool.Pool
	// Logger receives the listener's logs (nil: none), with errors in
	// Redact's words (nil: the error's text).
	Logger *slog.Logger
	Redact func(error) string
}

// New returns a listener on cfg.Pool's database. Run it with Run.
func New(cfg Config) *Listener {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Redact == nil {
		cfg.Redact = func(err error) string { return err.Error() }
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Listener{cfg: cfg, probe: "probe-" + hex.EncodeToString(b),
		subs: map[string]*subscription{}, changed: make(chan struct{}, 1)}
}

// Subscribe returns the broadcast that notifications for schema wake, and
// the function that ends the subscription.
func (l *Listener) Subscribe(schema string) (*Broadcast, func()) {
	channel := Channel(schema)
	sub := &subscription{schema: schema, b: NewBroadcast()}
	l.mu.Lock()
	l.subs[channel] = sub
	l.mu.Unlock()
	l.poke()
	return sub.b, func() {
		l.mu.Lock()
		if l.subs[channel] == sub {
			delete(l.subs, channel)
		}
		l.mu.Unlock()
		l.poke()
	}
}

// poke tells the connection that the subscriptions changed.
func (l *Listener) poke() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// Listening reports whether notifications arrive: the connection listens
// and its probe came back.
func (l *Listener) Listening() bool { return l.ok.Load() }

// wakeAll wakes every subscribed relay: notifications may have been missed.
func (l *Listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, sub := range l.subs {
		sub.b.Wake()
	}
}

// Run listens until ctx ends, and listens again after a lost connection.
// When notifications cannot arrive (LISTEN refused, or the probe never
// comes back, as behind a transaction-pooling PgBouncer) it warns once and
// returns, leaving the relays to polling.
func (l *Listener) Run(ctx context.Context) {
	wait := time.Second
	for ctx.Err() == nil {
		err := l.listen(ctx)
		l.ok.Store(false)
		l.wakeAll()
		if ctx.Err() != nil {
			return
		}
		var unusable *notifyUnusableError
		if errors.As(err, &unusable) {
			l.cfg.Logger.Warn("RELAY_NOTIFY: notifications cannot reach this relay; it relies on polling (RELAY_POLL_INTERVAL)", "reason", unusable.reason)
			return
		}
		l.cfg.Logger.Warn("RELAY_NOTIFY: listening failed; polling meanwhile, listening again", "err", l.cfg.Redact(err), "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// notifyUnusableError says why notifications cannot work here at all.
type notifyUnusableError struct{ reason string }

func (e *notifyUnusableError) Error() string { return e.reason }

// listen holds a dedicated connection, LISTENs on the probe's channel and
// every subscribed one, checks that its probe comes back, and wakes the
// subscribers on each notification until the connection fails or ctx ends.
func (l *Listener) listen(ctx context.Context) error {
	pc, err := l.cfg.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection to listen on: %w", err)
	}
	conn := pc.Hijack() // dedicated: never returned to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{probeChannel}.Sanitize()); err != nil {
		return &notifyUnusableError{reason: "LISTEN was refused: " + l.cfg.Redact(err)}
	}
	listened := map[string]bool{}
	if err := l.syncChannels(ctx, conn, listened); err != nil {
		return err
	}
	// Behind a transaction-pooling PgBouncer LISTEN succeeds but its
	// session is gone with the transaction: the probe never comes back.
	if _, err := l.cfg.Pool.Exec(ctx, "SELECT pg_notify($1, $2)", probeChannel, l.probe); err != nil {
		return fmt.Errorf("send the probe notification: %w", err)
	}
	probeBy := time.Now().Add(probeTimeout)
	for !l.ok.Load() {
		waitCtx, cancel := context.WithDeadline(ctx, probeBy)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && pgconn.Timeout(err):
			return &notifyUnusableError{reason: fmt.Sprintf("the relay's own probe notification did not come back within %s (a transaction-pooling PgBouncer cannot carry LISTEN)", probeTimeout)}
		case err != nil:
			return err
		case n.Channel == probeChannel && n.Payload == l.probe:
			l.ok.Store(true)
		default:
			l.deliver(n.Channel) // an insert that committed while probing
		}
	}
	l.mu.Lock()
	for ch := range listened {
		if sub := l.subs[ch]; sub != nil {
			l.cfg.Logger.Info("RELAY_NOTIFY: listening for inserts", "schema", sub.schema, "channel", ch)
		}
	}
	l.mu.Unlock()
	// Whatever was inserted before the connection listened is found by
	// the claims this wakes.
	l.wakeAll()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, listenWait)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && pgconn.Timeout(err):
		case err != nil:
			return err
		default:
			l.deliver(n.Channel)
		}
		select {
		case <-l.changed:
			if err := l.syncChannels(ctx, conn, listened); err != nil {
				return err
			}
		default:
		}
	}
}

// syncChannels LISTENs on every subscribed channel not yet listened to, and
// UNLISTENs from those no longer subscribed, recording them in listened.
func (l *Listener) syncChannels(ctx context.Context, conn *pgx.Conn, listened map[string]bool) error {
	l.mu.Lock()
	var add, drop []string
	for ch := range l.subs {
		if !listened[ch] {
			add = append(add, ch)
		}
	}
	announce := l.ok.Load()
	for ch := range listened {
		if l.subs[ch] == nil {
			drop = append(drop, ch)
		}
	}
	l.mu.Unlock()
	for _, ch := range add {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen on %s: %w", ch, err)
		}
		listened[ch] = true
		// Inserts before the LISTEN went unheard: the relay claims once.
		l.mu.Lock()
		if sub := l.subs[ch]; sub != nil {
			if announce {
				l.cfg.Logger.Info("RELAY_NOTIFY: listening for inserts", "schema", sub.schema, "channel", ch)
			}
			sub.b.Wake()
		}
		l.mu.Unlock()
	}
	for _, ch := range drop {
		if _, err := conn.Exec(ctx, "UNLISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("stop listening on %s: %w", ch, err)
		}
		delete(listened, ch)
	}
	return nil
}

// deliver wakes the relay subscribed to channel.
func (l *Listener) deliver(channel string) {
	l.mu.Lock()
	sub := l.subs[channel]
	l.mu.Unlock()
	if sub != nil {
		sub.b.Wake()
	}
}
