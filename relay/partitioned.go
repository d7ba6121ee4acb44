package relay

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/buckets"
	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
)

// partitioned gives each relay a share of the 64 buckets (the buckets
// package keeps it): a row's bucket follows from its key (its id when it
// has none), only the bucket's owner claims and settles its rows, and a
// key's rows are delivered in insert order, pipelined (deliverInKeyOrder).
// See doc.go.
type partitioned struct {
	e     *engine
	owner *buckets.Owner
	held  *heldKeys
	// claiming lets one claim of this relay run at a time: a claim
	// that overlapped another saw the rows that one was leasing as
	// nobody's, and held back every key whose previous row it took,
	// where after its commit they are this relay's, and its keys' next
	// rows are claimed behind them (keyorder.go).
	claiming sync.Mutex
	claims   [2]string // [1] with held keys
	settle   settleStatements
	// failing follows the owner's failed rounds, for the log.
	failing reminder
	// live beats at every round of the owner (run). Its pauses between
	// rounds are a renewal interval at most (1 s), so it does not wait.
	live *liveness.Loop
}

// backlogBuckets is how many buckets a claim walks during a backlog: each
// bucket walked costs the claim a scan of its own (a 200k burst drained 13%
// faster with 16 at a time than with all 64, and 8–14% faster again once
// each walk took the index's order).
const backlogBuckets = 16

func newPartitioned(e *engine) *partitioned {
	s := e.cfg.Schema
	for _, change := range buckets.Changes {
		e.metrics.BucketChanges.WithLabelValues(change)
	}
	m := &partitioned{
		e:      e,
		held:   newHeldKeys(),
		claims: [2]string{renderBucketsClaim(s, false), renderBucketsClaim(s, true)},
		settle: renderSettle(s, settleSlots{fenceCTE: bucketFenceCTE, fence: bucketFence}, true),
	}
	m.settle.dropped = "rows were claimed again, or their buckets are no longer this relay's, before it settled them; their outcome here is dropped and the bucket's owner delivers them"
	m.owner = buckets.NewOwner(buckets.Config{
		DB: e.pool, Schema: s, QuotedSchema: outbox.QuoteSchema(s), RelayID: e.cfg.ID, RowLease: e.cfg.Lease,
		Heartbeat: func(ctx context.Context, tx pgx.Tx) error {
			return e.heartbeat(ctx, tx)
		},
		Logger: e.log,
		Hooks: buckets.Hooks{
			Changed:    func(change string, n int) { e.metrics.BucketChanges.WithLabelValues(change).Add(float64(n)) },
			HandedOver: func(d time.Duration) { e.metrics.BucketHandovers.Observe(d.Seconds()) },
			Owned:      func(n int) { e.metrics.BucketsOwned.Set(float64(n)) },
			Round:      m.roundDone,
		},
	})
	return m
}

// claimers returns two loops that claim from the owned buckets. Each
// relay sees only its buckets' part of a stream, which a claim often finds
// empty while the stream goes on: one loop looks again soon (eagerPause)
// until a whole poll interval has passed without rows found by either
// loop (the other modes' eager loops stop sooner: streamPauses). The
// other helps with backlogs.
func (m *partitioned) claimers() []claimer {
	lead := m.claimer()
	lead.eagerPause = m.eagerPause
	second := m.claimer()
	second.follower = true
	return []claimer{lead, second}
}

// eagerPause is how long the eager claim loop waits after an empty claim
// while its buckets had rows within a poll interval: a tenth of
// PollInterval with one or two relays alive, and proportionally longer with
// more, so that the fleet's claims while a stream flows do not grow with
// its size (each claim costs the database the same, and finds fewer rows
// when more relays share the stream).
func (m *partitioned) eagerPause() time.Duration {
	return m.e.cfg.PollInterval / 10 * time.Duration(max(1, m.owner.Alive()/2))
}

// claimer returns a claim loop that claims from the owned buckets, each
// giving its share of the batch (larger for buckets that keep filling
// theirs), and leaves out the keys a claim held back. After a full batch (a
// backlog) it claims from backlogBuckets of them at a time, in turn, so
// that every bucket still gets its turn.
// bucketsClaimArgs returns the arguments of queryBucketsClaim for req
// over buckets, held under epochs, each giving at most its share; the
// caller adds the held keys.
func (m *partitioned) bucketsClaimArgs(req claimRequest, buckets []int32, epochs []int64, shares []int32) pgx.StrictNamedArgs {
	args := m.e.claims.claimArgs(req)
	args["buckets"], args["epochs"], args["shares"] = buckets, epochs, shares
	args["keys_in_flight"] = "{}" // runChainedClaim sets them once its chains' links are kept
	m.e.idFloorArgs(args)
	return args
}

func (m *partitioned) claimer() claimer {
	backlog := false // the loop's last claim was full
	// filled is set when a bucket of the loop's last claim gave its whole
	// share: rows are left behind, though the shares rarely add up to the
	// claim's limit.
	filled := false
	claim := func(ctx context.Context, req claimRequest) ([]claimedRow, error) {
		most := 0
		if backlog {
			most = backlogBuckets
		}
		c := m.owner.Claimable(req.limit, most)
		if len(c.Buckets) == 0 {
			return nil, nil
		}
		held := m.held.current(time.Now())
		args := m.bucketsClaimArgs(req, c.Buckets, c.Epochs, c.Shares)
		stmt := m.claims[0]
		if len(held) > 0 {
			args["held_keys"] = held
			stmt = m.claims[1]
		}
		// The claim may name rows of this relay's that a settle is
		// writing down (after): their links are kept until it ends.
		m.claiming.Lock()
		batch, keys, err := m.e.runChainedClaim(ctx, stmt, args, req, "claim rows of owned buckets")
		m.claiming.Unlock()
		rows := make([]int32, len(batch))
		for i := range batch {
			// The epoch the claim checked, even if the bucket changed
			// hands since: the settle's fence must present it.
			batch[i].epoch = c.Epoch(batch[i].bucket)
			rows[i] = batch[i].bucket
		}
		m.owner.Claimed(c, rows)
		m.held.holdKeys(keys, time.Now())
		if err != nil {
			return nil, err
		}
		backlog = len(batch) == req.limit
		filled = gaveShare(c, rows)
		if len(batch) > 0 && m.e.log.Enabled(ctx, slog.LevelDebug) {
			m.e.log.Debug("claimed rows of owned buckets", "num_rows", len(batch), "fences", fences(batch))
		}
		return batch, nil
	}
	return claimer{what: "rows of owned buckets", claim: claim, more: func() bool { return filled }}
}

// minFullShare is the least share of a bucket that, given whole, makes a
// claim count as full (gaveShare).
const minFullShare = 8

// gaveShare reports whether a bucket of claim c gave its whole share of
// rows, a share of at least minFullShare (rows holds the bucket of each
// row the claim leased): a bucket's share of one or two rows says little
// of what is left behind.
func gaveShare(c buckets.Claim, rows []int32) bool {
	gave := make(map[int32]int32, len(c.Buckets))
	for _, b := range rows {
		gave[b]++
	}
	for i, b := range c.Buckets {
		if c.Shares[i] >= minFullShare && gave[b] >= c.Shares[i] {
			return true
		}
	}
	return false
}

// fences lists the buckets of batch with the epochs they were claimed
// under, as "bucket:epoch" in bucket order, for the debug log that tests
// read to check that no bucket is processed by two relays at once.
func fences(batch []claimedRow) string {
	seen := map[int32]int64{}
	for i := range batch {
		seen[batch[i].bucket] = batch[i].epoch
	}
	ids := make([]int32, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id)) + ":" + strconv.FormatInt(seen[id], 10)
	}
	return strings.Join(parts, ",")
}

func (m *partitioned) deliverBatch(ctx context.Context, d *sinkDelivery) {
	deliverInKeyOrder(ctx, d, m.e.chains)
}

func (m *partitioned) settleStatements() settleStatements { return m.settle }

func (m *partitioned) oldestClaimable() string { return oldestRow }

// fenceArgs returns the distinct (bucket, epoch) pairs of items, with the
// relay's id: a settle touches a row only while its bucket is still this
// relay's under the epoch it was claimed under.
func (m *partitioned) fenceArgs(items []rowOutcome) pgx.StrictNamedArgs {
	seen := map[buckets.Fence]bool{}
	var ids []int32
	var epochs []int64
	for i := range items {
		f := buckets.Fence{Bucket: items[i].bucket, Epoch: items[i].epoch}
		if !seen[f] {
			seen[f] = true
			ids, epochs = append(ids, f.Bucket), append(epochs, f.Epoch)
		}
	}
	return pgx.StrictNamedArgs{"relay_id": m.e.cfg.ID, "fence_buckets": ids, "fence_epochs": epochs}
}

// afterSettle tells the owner that the rows of items are no longer in flight
// and lets their keys' next rows be claimed.
func (m *partitioned) afterSettle(items []rowOutcome) {
	rows := make([]buckets.Fence, len(items))
	for i := range items {
		rows[i] = buckets.Fence{Bucket: items[i].bucket, Epoch: items[i].epoch}
	}
	m.owner.Settled(rows)
	m.held.releaseKeys(items)
}

// runMode keeps the relay's share of the buckets until ctx ends, then releases
// them.
func (m *partitioned) runMode(ctx context.Context) {
	m.live = m.e.live.Start("bucket owner")
	defer m.live.Done()
	m.owner.Run(ctx)
}

// roundDone logs the owner's failed rounds, once when they begin, then as
// reminders, and when they work again, and beats m.live.
func (m *partitioned) roundDone(err error) {
	m.live.Beat()
	now := time.Now()
	switch {
	case err != nil && m.failing.begin(now):
		m.e.log.Error("cannot renew or rebalance buckets; claims stop for each bucket whose lease runs short", "err", redactConnError(err))
	case err != nil && m.failing.remindNow(now):
		m.e.log.Error("still cannot renew or rebalance buckets", "for", now.Sub(m.failing.since).Round(time.Second), "err", redactConnError(err))
	case err == nil && !m.failing.since.IsZero():
		m.e.log.Info("renewing buckets again", "failed_for", m.failing.end(now).Round(time.Millisecond))
	}
}

func (m *partitioned) countDue(ctx context.Context, r *gaugeReadings) error {
	return m.e.countDueRows(ctx, r)
}

// heldKeys are the keys the claims of this relay hold back
// (queryBucketsClaim), until when.
type heldKeys struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// maxHeldKeys bounds the keys a claim is told to leave out (keys are
// producers' data, up to 1000 characters each): beyond it, a random subset
// each claim, as map iteration gives them.
const maxHeldKeys = 1000

// heldAtLeast is the least time a key is held: while it is, the claim
// takes its oldest row alone, which is what moves a key whose oldest row is
// due but sorts after its others.
const heldAtLeast = time.Second

func newHeldKeys() *heldKeys { return &heldKeys{until: map[string]time.Time{}} }

// current returns the keys held at now (at most maxHeldKeys) and forgets
// those whose time is over.
func (h *heldKeys) current(now time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var keys []string
	for k, until := range h.until {
		if now.Before(until) {
			if len(keys) < maxHeldKeys {
				keys = append(keys, k)
			}
		} else {
			delete(h.until, k)
		}
	}
	return keys
}

// holdKeys holds the keys a claim reported until their time, and at least
// heldAtLeast from now.
func (h *heldKeys) holdKeys(keys []heldKey, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	least := now.Add(heldAtLeast)
	for _, k := range keys {
		until := k.until
		if until.Before(least) {
			until = least
		}
		h.until[k.key] = until
	}
}

// releaseKeys lets go of the keys of settled outcomes.
func (h *heldKeys) releaseKeys(items []rowOutcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range items {
		if items[i].key != "" {
			delete(h.until, items[i].key)
		}
	}
}
