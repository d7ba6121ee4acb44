package relay

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Partitioned mode: which buckets this relay owns, and the round that
// renews, acquires and releases them. See doc.go for the protocol.

// bucketCount is the number of buckets (migration 7, messages_bucket).
const bucketCount = 64

// bucketTimes are a schema's partitioned-mode timings, derived from the
// row lease: every relay of a schema must run the same RELAY_LEASE.
type bucketTimes struct {
	// renew is how often a relay renews its buckets, heartbeats and
	// rebalances.
	renew time.Duration
	// lease is how long a renewed bucket stays its owner's: the row lease
	// plus three renewals, so that a claim (which needs the bucket's lease
	// to outlive the rows' lease) can go on while a renewal or two is late.
	lease time.Duration
	// alive is how long a relay counts as alive, sharing the buckets,
	// after its last renewal: as long as its buckets' leases last. Its
	// buckets cannot move sooner anyway, and a relay slowed down (a loaded
	// machine, a long pause for garbage collection) is not taken for gone
	// while it still holds them, which would make the others reach for a
	// share they cannot get and then give it back.
	alive time.Duration
}

func timesFor(rowLease time.Duration) bucketTimes {
	renew := min(max(rowLease/10, 100*time.Millisecond), time.Second)
	lease := rowLease + 3*renew
	return bucketTimes{renew: renew, lease: lease, alive: lease}
}

// ownedBucket is a bucket this relay owns.
type ownedBucket struct {
	epoch int64
	// inFlight counts its rows claimed and not yet settled.
	inFlight int
	// releasing is when the relay decided to give it up (zero: it keeps
	// it): no claim takes its rows, and it is released once inFlight is 0.
	releasing time.Time
	// weight sizes its share of a claim: doubled while claims fill it.
	weight int
	// claiming counts the claims under way that may lease its rows: it is
	// not released before they are done.
	claiming int
}

// buckets is this relay's view of the buckets it owns, and the keys its
// claims hold back (queryBucketsClaim).
type buckets struct {
	mu    sync.Mutex
	owned map[int32]*ownedBucket
	held  map[string]time.Time
	// turn rotates which buckets get the rows of a claim smaller than the
	// number of buckets.
	turn int
	// drained receives when a bucket being given up has nothing left in
	// flight: it can be released now rather than at the next round.
	drained chan struct{}
}

func newBuckets() *buckets {
	return &buckets{owned: map[int32]*ownedBucket{}, held: map[string]time.Time{}, drained: make(chan struct{}, 1)}
}

// signalIfDrained signals drained when o is being given up and holds
// nothing; b.mu is held.
func (b *buckets) signalIfDrained(o *ownedBucket) {
	if !o.releasing.IsZero() && o.inFlight <= 0 && o.claiming <= 0 {
		select {
		case b.drained <- struct{}{}:
		default:
		}
	}
}

// claimable returns the buckets to claim from (owned, not being given up;
// at most most of them, taken in turn, when most > 0), with their epochs
// and the share of limit rows each may give (adding up to at most limit),
// and the keys held back now.
func (b *buckets) claimable(limit, most int, now time.Time) (ids []int32, epochs []int64, shares []int32, held []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, o := range b.owned {
		if o.releasing.IsZero() {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil, nil, nil
	}
	slices.Sort(ids)
	b.turn++
	if most > 0 && len(ids) > most {
		start := b.turn * most % len(ids)
		ids = append(ids[start:], ids[:start]...)[:most]
		slices.Sort(ids)
	}
	total := 0
	for _, id := range ids {
		total += b.owned[id].weight
	}
	epochs = make([]int64, len(ids))
	shares = make([]int32, len(ids))
	given := 0
	for i, id := range ids {
		o := b.owned[id]
		o.claiming++
		epochs[i] = o.epoch
		shares[i] = int32(limit * o.weight / total)
		given += int(shares[i])
	}
	// What the rounding left goes one row each, from a rotating start.
	for i := 0; given < limit && i < len(ids); i++ {
		shares[(b.turn+i)%len(ids)]++
		given++
	}
	for k, until := range b.held {
		if now.Before(until) {
			if len(held) < maxHeldKeys {
				held = append(held, k)
			}
		} else {
			delete(b.held, k)
		}
	}
	return ids, epochs, shares, held
}

// maxHeldKeys bounds the keys a claim is told to leave out (keys are
// producers' data, up to 1000 characters each): beyond it, a random subset
// each claim, as map iteration gives them.
const maxHeldKeys = 1000

// claimed records the end of a claim over ids under epochs (failed or
// not): its rows
// are in flight, each bucket that gave all it could gets a larger share next
// time, the others their base share, and held keys are left out until their
// time.
func (b *buckets) claimed(ids []int32, epochs []int64, shares []int32, batch []claimed, held []heldKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	claimedUnder := make(map[int32]int64, len(ids))
	for i, id := range ids {
		claimedUnder[id] = epochs[i]
		if o := b.owned[id]; o != nil {
			o.claiming--
			defer b.signalIfDrained(o)
		}
	}
	got := map[int32]int32{}
	for i := range batch {
		got[batch[i].bucket]++
		// The epoch the claim checked, even if the bucket changed hands
		// since: the settle's fence must present it.
		batch[i].epoch = claimedUnder[batch[i].bucket]
		if o := b.owned[batch[i].bucket]; o != nil && o.epoch == batch[i].epoch {
			o.inFlight++
		}
	}
	for i, id := range ids {
		o := b.owned[id]
		if o == nil {
			continue
		}
		if shares[i] > 0 && got[id] >= shares[i] {
			o.weight = min(2*o.weight, 1<<10)
		} else if shares[i] > 0 {
			o.weight = 1
		}
	}
	// A key is held for a while at least: while it is, the claim takes its
	// oldest row alone, which is what moves a key whose oldest row is due
	// but sorts after its others.
	least := time.Now().Add(laneRecheck)
	for _, h := range held {
		until := h.until
		if until.Before(least) {
			until = least
		}
		b.held[h.key] = until
	}
}

// settled records outcomes written down (or given up): their rows are no
// longer in flight, and their keys' next rows may be claimable.
func (b *buckets) settled(items []outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range items {
		if o := b.owned[items[i].bucket]; o != nil && o.epoch == items[i].epoch {
			o.inFlight--
			b.signalIfDrained(o)
		}
		if items[i].key != "" {
			delete(b.held, items[i].key)
		}
	}
}

// fence returns the distinct (bucket, epoch) pairs of items, for the
// settle's fence.
func fence(items []outcome) (ids []int32, epochs []int64) {
	type pair struct {
		bucket int32
		epoch  int64
	}
	seen := map[pair]bool{}
	for i := range items {
		p := pair{items[i].bucket, items[i].epoch}
		if !seen[p] {
			seen[p] = true
			ids = append(ids, p.bucket)
			epochs = append(epochs, p.epoch)
		}
	}
	return ids, epochs
}

// eagerPause is how long the eager claim loop of partitioned mode waits
// after an empty claim while its buckets had rows within a poll interval: a
// tenth of PollInterval with one or two relays alive, and proportionally
// longer with more, so that the fleet's claims while a stream flows do not
// grow with its size (each claim costs the database the same, and finds
// fewer rows when more relays share the stream).
func (r *Relay) eagerPause() time.Duration {
	return r.cfg.PollInterval / 10 * time.Duration(max(1, r.relaysAlive.Load()/2))
}

// share is how many buckets the relay of rank (0-based, by id) gets when n
// relays share them: as even as can be, the first ones one more.
func share(rank, n int) int {
	if n == 0 {
		return bucketCount
	}
	s := bucketCount / n
	if rank < bucketCount%n {
		s++
	}
	return s
}

// bucketLoop runs a rebalancing round every renewal interval until ctx
// ends, then releases every bucket the relay owns: the relay has stopped
// and settled everything, and the others may take them at once. Handovers
// go faster than the interval: a bucket being given up is released as soon
// as its rows in flight are settled, and a relay short of its share looks
// for free buckets five times per interval.
func (r *Relay) bucketLoop(ctx context.Context) {
	t := time.NewTicker(r.bucketTimes.renew)
	defer t.Stop()
	var failing reminder
	for {
		short, err := r.rebalance(ctx)
		now := time.Now()
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil && failing.begin(now):
			r.log.Error("cannot renew or rebalance buckets; claims stop for each bucket whose lease runs short", "err", redactConnError(err))
		case err != nil && failing.due(now):
			r.log.Error("still cannot renew or rebalance buckets", "for", now.Sub(failing.since).Round(time.Second), "err", redactConnError(err))
		case err == nil && !failing.since.IsZero():
			r.log.Info("renewing buckets again", "failed_for", failing.end(now).Round(time.Millisecond))
		}
		var soon <-chan time.Time
		if short {
			soon = time.After(r.bucketTimes.renew / 5)
		}
		select {
		case <-ctx.Done():
			r.releaseAll(context.WithoutCancel(ctx))
			return
		case <-t.C:
		case <-soon:
		case <-r.buckets.drained:
		}
	}
}

// rebalance runs one round, in one transaction that holds the schema's
// bucket lock (so that relays rebalance one after the other, each seeing
// the others' changes): it records that the relay is alive, renews its
// buckets (those it no longer holds are lost), computes its share of the
// buckets over the relays alive, gives up what it has beyond it (each
// bucket once its rows in flight are settled) and acquires free buckets up
// to it. Moves are as few as the shares allow: a relay releases only its
// excess and acquires only its deficit. It reports whether the relay is
// still short of its share.
func (r *Relay) rebalance(ctx context.Context) (short bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.bucketTimes.lease-r.cfg.Lease)
	defer cancel()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("rebalance buckets: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	idleLimit := strconv.FormatInt((2 * r.bucketTimes.renew).Milliseconds(), 10)
	if _, err := tx.Exec(ctx, queryBucketsLock, idleLimit, "outbox-relay:buckets:"+r.cfg.Schema); err != nil {
		return false, fmt.Errorf("rebalance buckets: lock: %w", err)
	}
	var recorded string
	if err := tx.QueryRow(ctx, r.q.relaysHeartbeat, r.cfg.ID, r.cfg.Version, r.mode(), r.cfg.Notify).Scan(&recorded); err != nil {
		return false, fmt.Errorf("rebalance buckets: heartbeat: %w", err)
	}
	renewed, err := bucketEpochs(tx.Query(ctx, r.q.bucketsRenew, r.cfg.ID, r.bucketTimes.lease))
	if err != nil {
		return false, fmt.Errorf("rebalance buckets: renew: %w", err)
	}
	rows, err := tx.Query(ctx, r.q.bucketsLive, r.bucketTimes.alive)
	if err != nil {
		return false, fmt.Errorf("rebalance buckets: read relays: %w", err)
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("rebalance buckets: read relays: %w", err)
	}
	target := share(max(slices.Index(live, r.cfg.ID), 0), len(live))
	r.relaysAlive.Store(int64(len(live)))

	now := time.Now()
	release, releaseEpochs, decidedAt, want := r.buckets.reconcile(r, renewed, target, now)
	if len(release) > 0 {
		if _, err := tx.Exec(ctx, r.q.bucketsRelease, r.cfg.ID, release, releaseEpochs); err != nil {
			return false, fmt.Errorf("rebalance buckets: release: %w", err)
		}
	}
	acquired := map[int32]int64{}
	if want > 0 {
		acquired, err = bucketEpochs(tx.Query(ctx, r.q.bucketsAcquire, r.cfg.ID, r.bucketTimes.lease, want))
		if err != nil {
			return false, fmt.Errorf("rebalance buckets: acquire: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("rebalance buckets: %w", err)
	}
	if len(release) > 0 {
		r.buckets.drop(release, releaseEpochs)
		r.metrics.BucketChanges.WithLabelValues("released").Add(float64(len(release)))
		for _, at := range decidedAt {
			r.metrics.BucketHandovers.Observe(time.Since(at).Seconds())
		}
		r.log.Info("released buckets", "buckets", release, "epochs", releaseEpochs, "relays_alive", len(live), "share", target)
	}
	if len(acquired) > 0 {
		ids := r.buckets.add(acquired)
		epochs := make([]int64, len(ids))
		for i, id := range ids {
			epochs[i] = acquired[id]
		}
		r.metrics.BucketChanges.WithLabelValues("acquired").Add(float64(len(ids)))
		r.log.Info("acquired buckets", "buckets", ids, "epochs", epochs, "relays_alive", len(live), "share", target)
	}
	r.metrics.BucketsOwned.Set(float64(r.buckets.count()))
	return len(acquired) < want || r.buckets.releasing(), nil
}

// bucketEpochs reads the (bucket, epoch) rows that renewing and acquiring
// buckets return.
func bucketEpochs(rows pgx.Rows, err error) (map[int32]int64, error) {
	if err != nil {
		return nil, err
	}
	epochs := map[int32]int64{}
	var id int32
	var epoch int64
	_, err = pgx.ForEachRow(rows, []any{&id, &epoch}, func() error {
		epochs[id] = epoch
		return nil
	})
	return epochs, err
}

// reconcile brings the relay's view in line with the buckets it renewed:
// buckets it no longer holds are lost (logged and counted), buckets held
// under its id that it did not know of (left by an earlier process with the
// same id) are released at once. Then, against target: when the relay
// keeps more, it starts giving up the excess (the highest buckets); when
// fewer, it keeps those it was giving up first. It returns the buckets to
// release now (given up, nothing in flight, or their rows' leases over),
// with their epochs and when each was given up, and how many buckets to
// acquire.
func (b *buckets) reconcile(r *Relay, renewed map[int32]int64, target int, now time.Time) (release []int32, epochs []int64, decidedAt []time.Time, want int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var lost []int32
	for id, o := range b.owned {
		if e, ok := renewed[id]; !ok || e != o.epoch {
			lost = append(lost, id)
			delete(b.owned, id)
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		r.metrics.BucketChanges.WithLabelValues("lost").Add(float64(len(lost)))
		r.log.Warn("lost buckets: their leases ran out before this relay renewed them (paused, cut off from the database); their rows in flight will not be settled here",
			"buckets", lost)
	}
	for id, e := range renewed {
		if _, ok := b.owned[id]; !ok {
			release, epochs, decidedAt = append(release, id), append(epochs, e), append(decidedAt, now)
		}
	}
	var kept, giving []int32
	for id, o := range b.owned {
		if o.releasing.IsZero() {
			kept = append(kept, id)
		} else {
			giving = append(giving, id)
		}
	}
	slices.Sort(kept)
	slices.Sort(giving)
	switch {
	case len(kept) > target:
		for _, id := range kept[target:] {
			b.owned[id].releasing = now
		}
	case len(kept) < target:
		for _, id := range giving {
			if len(kept) == target {
				break
			}
			b.owned[id].releasing = time.Time{}
			kept = append(kept, id)
		}
		want = target - len(kept)
	}
	for id, o := range b.owned {
		if !o.releasing.IsZero() && o.claiming <= 0 && (o.inFlight <= 0 || now.Sub(o.releasing) > r.cfg.Lease) {
			release, epochs, decidedAt = append(release, id), append(epochs, o.epoch), append(decidedAt, o.releasing)
		}
	}
	return release, epochs, decidedAt, want
}

// drop forgets buckets released under the given epochs.
func (b *buckets) drop(ids []int32, epochs []int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, id := range ids {
		if o := b.owned[id]; o != nil && o.epoch == epochs[i] {
			delete(b.owned, id)
		}
	}
}

// add records buckets acquired with their epochs and returns their ids in
// order.
func (b *buckets) add(acquired map[int32]int64) []int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]int32, 0, len(acquired))
	for id, e := range acquired {
		b.owned[id] = &ownedBucket{epoch: e, weight: 1}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// releasing reports whether the relay is giving up a bucket.
func (b *buckets) releasing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.owned {
		if !o.releasing.IsZero() {
			return true
		}
	}
	return false
}

// count returns how many buckets the relay owns.
func (b *buckets) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.owned)
}

// all returns the buckets the relay owns, with their epochs.
func (b *buckets) all() (ids []int32, epochs []int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, o := range b.owned {
		ids, epochs = append(ids, id), append(epochs, o.epoch)
	}
	return ids, epochs
}

// releaseAll gives up every bucket the relay owns, at shutdown.
func (r *Relay) releaseAll(ctx context.Context) {
	ids, epochs := r.buckets.all()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := r.pool.Exec(ctx, r.q.bucketsRelease, r.cfg.ID, ids, epochs); err != nil {
		r.log.Warn("could not release buckets at shutdown; the other relays take them when their leases run out",
			"num_buckets", len(ids), "err", err)
		return
	}
	r.buckets.drop(ids, epochs)
	r.metrics.BucketChanges.WithLabelValues("released").Add(float64(len(ids)))
	r.metrics.BucketsOwned.Set(0)
	slices.Sort(ids)
	r.log.Info("released buckets at shutdown", "buckets", ids)
}
