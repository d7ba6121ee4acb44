package relay

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Opt-in wake-up (Config.Notify): the relay LISTENs on a dedicated
// connection for the NOTIFY that the messages_notify trigger sends for every
// inserting statement, and wakes every claim loop at once. Polling goes on:
// a notification only shortens the wait.

// notifyProbeTimeout is how long the relay waits for its own probe
// notification before concluding that notifications cannot arrive.
const notifyProbeTimeout = 3 * time.Second

// notifyChannel is the channel the schema's trigger notifies (005_notify.sql).
func notifyChannel(schema string) string {
	sum := md5.Sum([]byte(schema))
	return "outbox_relay_" + hex.EncodeToString(sum[:])[:16]
}

// broadcast wakes every waiter at once: wait returns a channel that the next
// wake closes.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

// wait returns the channel the next wake closes.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// wake wakes every waiter.
func (b *broadcast) wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// listenLoop listens for notifications until ctx ends, waking the claim
// loops on each, and re-listens after a lost connection. When notifications
// cannot arrive (LISTEN refused, or the relay's own probe never comes back,
// as behind a transaction-pooling PgBouncer) it warns once and leaves the
// relay to polling.
func (r *Relay) listenLoop(ctx context.Context) {
	channel := notifyChannel(r.cfg.Schema)
	wait := time.Second
	for ctx.Err() == nil {
		err := r.listen(ctx, channel)
		if ctx.Err() != nil {
			return
		}
		var unusable *notifyUnusableError
		if errors.As(err, &unusable) {
			r.log.Warn("RELAY_NOTIFY: notifications cannot reach this relay; it relies on polling (RELAY_POLL_INTERVAL)", "reason", unusable.reason)
			return
		}
		r.log.Warn("RELAY_NOTIFY: listening failed; polling meanwhile, listening again", "err", redactConnError(err), "retry_in", wait)
		sleep(ctx, wait)
		wait = min(2*wait, 30*time.Second)
	}
}

// notifyUnusableError says why notifications cannot work here at all.
type notifyUnusableError struct{ reason string }

func (e *notifyUnusableError) Error() string { return e.reason }

// listen holds a dedicated connection listening on channel, probes that a
// notification comes back, and wakes the claimers on each until the
// connection fails or ctx ends.
func (r *Relay) listen(ctx context.Context, channel string) error {
	pc, err := r.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection to listen on: %w", err)
	}
	conn := pc.Hijack() // dedicated: never returned to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return &notifyUnusableError{reason: "LISTEN was refused: " + redactConnError(err)}
	}
	// The probe: a notification sent through another connection must come
	// back on this one. Behind a transaction-pooling PgBouncer LISTEN
	// succeeds but its session is gone with the transaction.
	probe := "probe-" + r.cfg.ID
	if _, err := r.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, probe); err != nil {
		return fmt.Errorf("send the probe notification: %w", err)
	}
	probeCtx, cancel := context.WithTimeout(ctx, notifyProbeTimeout)
	for {
		n, err := conn.WaitForNotification(probeCtx)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if probeCtx.Err() != nil {
				return &notifyUnusableError{reason: fmt.Sprintf("the relay's own probe notification did not come back within %s (a transaction-pooling PgBouncer cannot carry LISTEN)", notifyProbeTimeout)}
			}
			return err
		}
		if n.Payload == probe {
			break
		}
		r.notified.wake() // an insert that committed while probing
	}
	cancel()
	r.log.Info("RELAY_NOTIFY: listening for inserts", "channel", channel)
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		r.notified.wake()
	}
}
