package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay"
)

// An outbox's share of a pool that several outboxes share is bounded, so
// that one outbox whose statements wait cannot take the connections the
// others need. What holds a connection for long is a statement waiting on
// a lock: with its messages table locked (LOCK TABLE, a long migration,
// VACUUM FULL), each of an outbox's loops (claims, gauges, the claim
// floor, rescues, retention) waits with a connection, and seven such
// outboxes held all 18 connections of the pool, another outbox's
// deliveries waiting up to 12 s for one.
//
// Each outbox may hold its fair share of the pool at once: the pool's
// size divided by the number of outboxes that share it, at least
// shareFloor and at most shareMost (what a relay serving the outbox alone
// would have). Outboxes that wait with all of their share therefore leave
// at least one share to the others as long as fewer than all of them
// wait, or, with shareFloor each, fewer than half the pool's size.
const (
	shareFloor = 2
	shareMost  = relay.PoolSize
)

// shares bounds the share of a pool each outbox takes. It is the pool's
// tracer (pgx.ConnConfig.Tracer), which pgxpool calls at the start and end
// of every Acquire and at every Release: an Acquire whose context names an
// outbox (join) waits at its start until the outbox holds less than its
// share; the connection is counted until it is released. An Acquire of a
// context without an outbox (the search for schemas, the shared listener)
// is not counted. A connection hijacked from the pool is never released:
// no outbox's relay hijacks one (its listener is the fleet's).
type shares struct {
	size int

	mu sync.Mutex
	// outboxes is the number of outboxes that share the pool; holder
	// names the outbox that holds each connection counted.
	outboxes int
	holder   map[*pgx.Conn]*share
	// changed is closed, and replaced, when a connection is released or
	// an outbox leaves: the waiters look again.
	changed chan struct{}
}

// share is one outbox's count of the connections it holds.
type share struct{ held int }

// shareKey and takenKey are context keys: the outbox an Acquire is for,
// and the share an Acquire took a place in.
type (
	shareKey struct{}
	takenKey struct{}
)

// newShares returns the tracer that bounds each outbox's share of a pool
// of size connections.
func newShares(size int) *shares {
	return &shares{size: size, holder: map[*pgx.Conn]*share{}, changed: make(chan struct{})}
}

// join counts one more outbox sharing the pool and returns ctx naming its
// share, for the Acquires of its relay, and leave, to call once the
// outbox stopped.
func (sh *shares) join(ctx context.Context) (_ context.Context, leave func()) {
	sh.mu.Lock()
	sh.outboxes++
	sh.mu.Unlock()
	return context.WithValue(ctx, shareKey{}, &share{}), func() {
		sh.mu.Lock()
		sh.outboxes--
		sh.wake()
		sh.mu.Unlock()
	}
}

// most is the number of connections each outbox may hold at once. Called
// with sh.mu held.
func (sh *shares) most() int {
	return min(shareMost, max(shareFloor, sh.size/max(sh.outboxes, 1)))
}

// wake lets the waiters look again. Called with sh.mu held.
func (sh *shares) wake() {
	close(sh.changed)
	sh.changed = make(chan struct{})
}

// take waits until s holds less than its share and counts one more
// connection; it reports false when ctx ends first.
func (sh *shares) take(ctx context.Context, s *share) bool {
	for {
		sh.mu.Lock()
		if s.held < sh.most() {
			s.held++
			sh.mu.Unlock()
			return true
		}
		changed := sh.changed
		sh.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// give counts a connection of s as released.
func (sh *shares) give(s *share) {
	sh.mu.Lock()
	s.held--
	sh.wake()
	sh.mu.Unlock()
}

// TraceAcquireStart waits for the outbox's turn, when ctx names one. When
// ctx ends first, the Acquire fails with its error.
func (sh *shares) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	s, _ := ctx.Value(shareKey{}).(*share)
	if s == nil || !sh.take(ctx, s) {
		return ctx
	}
	return context.WithValue(ctx, takenKey{}, s)
}

// TraceAcquireEnd records which outbox holds the connection, or gives
// the place back when the Acquire failed.
func (sh *shares) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	s, _ := ctx.Value(takenKey{}).(*share)
	switch {
	case s == nil:
	case data.Err != nil || data.Conn == nil:
		sh.give(s)
	default:
		sh.mu.Lock()
		sh.holder[data.Conn] = s
		sh.mu.Unlock()
	}
}

// cleanupWait bounds how long a closed connection's place waits for its
// cleanup (pgconn bounds it at 15 s too; a connection closed otherwise,
// hijacked, might never signal it).
const cleanupWait = 15 * time.Second

// TraceRelease gives the connection's place back to its outbox. A
// connection closed by its statement's context (a claim's deadline passed
// while the messages table is locked) is released at once, while pgconn
// cancels the statement and closes the connection in the background: the
// server goes on running the statement, waiting on the lock, until the
// cancel reaches it. Its place is given back once that is done
// (pgconn.PgConn.CleanupDone, at most cleanupWait), so that the outbox's next
// statement does not wait beside it past its share.
func (sh *shares) TraceRelease(_ *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	sh.mu.Lock()
	s := sh.holder[data.Conn]
	delete(sh.holder, data.Conn)
	sh.mu.Unlock()
	if s == nil {
		return
	}
	if pc := data.Conn.PgConn(); pc != nil && pc.IsClosed() {
		go func() {
			t := time.NewTimer(cleanupWait)
			defer t.Stop()
			select {
			case <-pc.CleanupDone():
			case <-t.C:
			}
			sh.give(s)
		}()
		return
	}
	sh.give(s)
}

// TraceQueryStart and TraceQueryEnd make shares a pgx.QueryTracer, the
// type of pgx.ConnConfig.Tracer; they do nothing.
func (sh *shares) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (sh *shares) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

var (
	_ pgxpool.AcquireTracer = (*shares)(nil)
	_ pgxpool.ReleaseTracer = (*shares)(nil)
)
