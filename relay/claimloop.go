package relay

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/internal/floor"
	"github.com/outbox-relay/outbox-relay/relay/internal/listener"
	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
)

// claimLoops are a relay's claim loops (one run each, as the mode's
// claimers say): each claims batches while there is capacity, and hands
// them to the dispatcher.
type claimLoops struct {
	cfg     *Config
	log     *slog.Logger
	metrics *Metrics
	// loops is how many claim loops share the in-flight byte budget.
	loops      int
	inflight   *inFlight
	watches    *sinkWatches
	pacer      *claimPacer
	dispatcher *dispatcher
	floor      *floor.State
	// notified wakes every claim loop when a producer inserted
	// (Config.Notify; notify.go), through listener, the database's
	// listener (nil without Notify). found wakes the follower loops when a
	// loop found rows.
	notified *listener.Broadcast
	found    *listener.Broadcast
	listener *Listener
	// idlePause is the loops' current pause after an empty claim (run),
	// which paces the floor's refreshes while idle.
	idlePause atomic.Int64
}

// fullBatchPatience is how many times PollInterval a claim after a full
// one waits for room for a whole batch when it claims for one sink: keyed
// rows, sent a round trip per row of a key, free room a few rows at a time
// (100 hot keys, partitioned: 1,329–1,825 claims of about 150 rows for
// 200k when it waited one PollInterval, 313–376 with ten). With several
// sinks it waits one PollInterval, so that a slow sink does not keep the
// others' rows unclaimed for long; a sink whose deliveries hang holds its
// room until their deadline, and the claims take what is left after this.
const fullBatchPatience = 10

// run claims batches with c and starts their deliveries until ctx
// ends. It claims again at once while batches come back full and capacity
// remains, waits a tenth of PollInterval after a claim that found some rows,
// and PollInterval after an empty one (c's eagerPause while a stream
// flows: eager), unless c is woken. It beats live at every turn, and its
// pauses are live's waits.
func (l *claimLoops) run(ctx context.Context, deliverCtx context.Context, c claimer, health *claimHealth, live *liveness.Loop) {
	failures := 0
	var failing reminder
	idle := l.cfg.PollInterval // the next pause after an empty claim
	// full is set while claims take every row they may (a backlog), and
	// waiting is when the loop began to wait for room in flight.
	full, waiting := false, time.Time{}
	for ctx.Err() == nil {
		live.Beat()
		// Taken before the claim: a notification, or rows found by another
		// loop, during the claim ends the pause after it.
		notified, found := l.notified.Wait(), l.found.Wait()
		closed, open := l.watches.states()
		bytes, oversized := l.inflight.takeBytes(l.loops)
		limit, want, atLeast := 0, cmp.Or(c.batch, l.cfg.BatchSize), 1
		patience := l.cfg.PollInterval
		if len(open) == 1 {
			patience = fullBatchPatience * l.cfg.PollInterval
		}
		if full && l.cfg.MaxInFlight >= 2*want && (waiting.IsZero() || time.Since(waiting) < patience) {
			// Draining a backlog, a claim waits for room for a whole
			// batch rather than take the few rows a settle just freed,
			// while other batches keep the sinks busy: every claim walks
			// the rows in flight and pays its statements, whatever it
			// takes. A 100k drain made 102–104 claims, not 124–148, and
			// used 3% less of PostgreSQL's CPU. It waits up to
			// PollInterval, or fullBatchPatience times that when it
			// claims for one sink only.
			atLeast = want
		}
		if bytes > 0 {
			limit = l.inflight.reserve(open, want, atLeast)
		}
		if limit == 0 {
			if waiting.IsZero() {
				waiting = time.Now()
			}
			l.inflight.addBytes(-bytes)
			// Every sink is unavailable, or one is at capacity (or has
			// no room for a whole batch, above): wait for a settle to free
			// capacity, or poll availability.
			live.Wait()
			waitCtx, cancel := context.WithTimeout(ctx, l.cfg.PollInterval)
			_ = l.inflight.waitFreed(waitCtx)
			cancel()
			continue
		}
		waiting = time.Time{}
		start := time.Now()
		l.pacer.claimStarted(c.what, start)
		// The claim is not cut short by shutdown at once: rows it leased
		// are delivered or released by the drain, not left leased until
		// the lease expires. A claim stuck behind a lock gives up after a
		// quarter of the lease, or claimShutdownGrace after shutdown
		// begins, so that a hung database cannot hold the shutdown.
		claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Lease/4)
		cutOff := context.AfterFunc(ctx, func() { time.AfterFunc(claimShutdownGrace, cancel) })
		batch, err := c.claim(claimCtx, claimRequest{limit: limit, bytes: bytes, oversized: oversized, closed: closed, stopping: ctx.Done()})
		cutOff()
		cancel()
		used := map[string]int{}
		var claimedBytes int64
		for i := range batch {
			claimedBytes += int64(len(batch[i].Payload))
		}
		l.inflight.addBytes(claimedBytes - bytes)
		if len(batch) > 0 {
			used = l.dispatcher.dispatch(deliverCtx, batch, open, start.Add(DeliveryBudget(l.cfg.Lease)))
		}
		l.inflight.unreserve(open, limit, used)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			health.recordFailure(err)
			l.metrics.ClaimErrors.Inc()
			wait := min(l.cfg.PollInterval<<min(failures, 10), 5*time.Second)
			now := time.Now()
			switch {
			case failing.begin(now):
				l.log.Error("claims fail: nothing is delivered until they work again; retrying", "claiming", c.what,
					"err", redactConnError(err), "retry_in", wait)
			case failing.remindNow(now):
				l.log.Error("claims still fail; retrying", "claiming", c.what, "for", now.Sub(failing.since).Round(time.Second),
					"consecutive_failures", failures, "err", redactConnError(err), "retry_in", wait)
			}
			live.Wait()
			sleep(ctx, wait)
			continue
		}
		if failures > 0 {
			l.log.Info("claiming again after failures", "claiming", c.what, "consecutive_failures", failures,
				"failed_for", failing.end(time.Now()).Round(time.Millisecond))
			failures = 0
		}
		health.recordSuccess()
		if len(batch) > 0 {
			l.pacer.rowsFound(c.what, time.Now())
			l.floor.Found()
			l.found.Wake()
			idle = l.cfg.PollInterval
			l.idlePause.Store(int64(idle))
		}
		full = len(batch) == limit || len(batch) > 0 && c.more != nil && c.more()
		live.Wait()
		switch {
		case full:
			// A full batch: more are waiting, claim again at once.
		case len(batch) > 0:
			// Rows are arriving: look again soon, so that a steady
			// stream is not delayed by a whole poll interval, taking
			// turns with the other loops (claimPacer).
			pause(ctx, l.pacer.afterRows(c.what, start, time.Now(), jittered(l.cfg.PollInterval/10)), c.wake, notified, nil)
		case l.eager(c):
			// A stream flows: its claims find nothing now and then.
			pause(ctx, jittered(c.eagerPause()), c.wake, notified, nil)
		case c.follower && idle > l.cfg.PollInterval:
			// Idle, and another loop polls: wait for its rows (or a
			// notification), polling only as a safety net.
			pause(ctx, jittered(followerIdlePolls*l.idlePollCap()), c.wake, notified, found)
		default:
			// Nothing found: the pauses grow while nothing is found, up to
			// IdlePollInterval, so that an idle outbox costs little.
			pause(ctx, jittered(idle), c.wake, notified, nil)
			idle = min(2*idle, l.idlePollCap())
			l.idlePause.Store(int64(idle))
		}
	}
}

// eager reports whether c, after an empty claim, pauses for its
// eagerPause rather than PollInterval: while a claim of its rows (what),
// by any loop, found some within the last PollInterval, or within
// c.eagerPauses+1 of its pauses when that is set; not while notifications
// wake the loops at each insert (they then look at once).
func (l *claimLoops) eager(c claimer) bool {
	switch {
	case c.eagerPause == nil:
		return false
	case l.listener != nil && l.listener.Listening():
		return false
	}
	within := l.cfg.PollInterval
	if c.eagerPauses > 0 {
		within = time.Duration(c.eagerPauses+1) * c.eagerPause()
	}
	return l.pacer.foundSince(c.what, time.Now().Add(-within))
}

// idlePollCap is the longest pause after empty claims: IdlePollInterval,
// or ten times it while notifications arrive, as an insert then wakes the
// loops at once. Without backoff (IdlePollInterval = PollInterval) it
// stays PollInterval.
func (l *claimLoops) idlePollCap() time.Duration {
	if l.cfg.IdlePollInterval > l.cfg.PollInterval && l.listener != nil && l.listener.Listening() {
		return 10 * l.cfg.IdlePollInterval
	}
	return l.cfg.IdlePollInterval
}

// jittered spreads d by ±20%, so that idle replicas do not poll in
// lockstep.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// followerIdlePolls is how many of the polling loop's longest pauses a
// follower loop waits while idle, when no loop finds rows.
const followerIdlePolls = 10

// pause waits d, until ctx ends, wake receives, or notified or found is
// closed (a nil channel never is).
func pause(ctx context.Context, d time.Duration, wake, notified, found <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-wake:
	case <-notified:
	case <-found:
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
