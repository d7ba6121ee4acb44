package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Partitioned mode in the benchmark: the scratch schema is put in the mode
// before the rows are written, and the run follows how its relays share the
// buckets.

// The figures a partitioned run reports in Result.Extra, in milliseconds
// from the start of its first relay. A figure is missing when the run ended
// before it was reached (a drain shorter than the rebalancing).
const (
	// ExtraBucketsOwned is when every bucket first had an owner.
	ExtraBucketsOwned = "buckets_owned_ms"
	// ExtraBucketsShared is when every relay first held its share of the
	// buckets (as even as can be: the shares differ by one at most).
	ExtraBucketsShared = "buckets_shared_ms"
)

// bucketsWatchEvery is how often the buckets table is read during a run.
const bucketsWatchEvery = 10 * time.Millisecond

// applyMode records the relay's mode as the schema's and lets the
// migrations' messages_apply_mode build what the mode needs on inserts (in
// partitioned mode, the index of the per-bucket claim; in ordered mode, the
// indexes of the heads and of the waiting rows), as a relay does when it
// switches an empty schema. A deployment in those modes pays that once,
// when it changes modes, not with each backlog: without this, the first
// relay of a run would build the indexes over the whole backlog inside the
// measured drain. The default mode is the schema's own.
func applyMode(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	mode := o.Relay.Mode
	if mode != outbox.ModePartitioned && mode != outbox.ModeOrdered {
		return nil
	}
	q := outbox.QuoteSchema(o.Schema)
	_, err := pool.Exec(ctx, "UPDATE "+q+".relay_mode SET mode = '"+string(mode)+"', changed_at = now(), changed_by = 'bench'; "+
		"SELECT "+q+".messages_apply_mode()")
	if err != nil {
		return fmt.Errorf("put the scratch schema in %s mode: %w", mode, err)
	}
	return nil
}

// BucketWatch follows the buckets table while a run's relays start:
// when every bucket first had an owner and when every relay first held its
// share.
type BucketWatch struct {
	owned, shared atomic.Int64 // time since start, 0 until then
	sharedCh      chan struct{}
	stop          context.CancelFunc
	done          chan struct{}
	err           error // of the last reading, when the watch ended on it
}

// WatchBuckets reads the buckets table of schema every
// bucketsWatchEvery from now until every one of relays relays holds its
// share, or until End is called or ctx ends.
func WatchBuckets(ctx context.Context, pool *pgxpool.Pool, schema string, relays int, start time.Time) *BucketWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &BucketWatch{sharedCh: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	query := `
SELECT CASE WHEN owner IS NOT NULL AND lease_until > now() THEN owner END, count(*)::int
  FROM ` + outbox.QuoteSchema(schema) + `.buckets GROUP BY 1`
	go func() {
		defer close(w.done)
		t := time.NewTicker(bucketsWatchEvery)
		defer t.Stop()
		for {
			owned, free, least, most, owners := 0, 0, 0, 0, 0
			rows, err := pool.Query(ctx, query)
			if err == nil {
				for rows.Next() {
					var owner *string
					var n int
					if err = rows.Scan(&owner, &n); err != nil {
						break
					}
					if owner == nil {
						free += n
						continue
					}
					if owners == 0 || n < least {
						least = n
					}
					most = max(most, n)
					owned += n
					owners++
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
			if err != nil && ctx.Err() == nil {
				w.err = fmt.Errorf("read the buckets: %w", err)
				return
			}
			if err == nil && owned > 0 && free == 0 {
				w.owned.CompareAndSwap(0, int64(time.Since(start)))
				if owners == min(relays, owned) && most-least <= 1 {
					w.shared.Store(int64(time.Since(start)))
					close(w.sharedCh)
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// waitShared waits until every relay holds its share of the buckets.
func (w *BucketWatch) waitShared(ctx context.Context) error {
	select {
	case <-w.sharedCh:
		return nil
	case <-w.done:
		if w.shared.Load() > 0 {
			return nil
		}
		if w.err != nil {
			return w.err
		}
		return fmt.Errorf("the relays did not share the buckets: %w", context.Cause(ctx))
	case <-ctx.Done():
		return fmt.Errorf("the relays did not share the buckets: %w", ctx.Err())
	}
}

// End stops the watch and records its figures in extra.
func (w *BucketWatch) End(extra map[string]any) error {
	w.stop()
	<-w.done
	for key, at := range map[string]int64{ExtraBucketsOwned: w.owned.Load(), ExtraBucketsShared: w.shared.Load()} {
		if at > 0 {
			extra[key] = round(float64(at)/1e6, 1)
		}
	}
	return w.err
}
