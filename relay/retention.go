package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Retention runs this often, deleting this many rows per statement. In
// ordered mode the lanes are checked at the first round and every
// laneRepairEvery rounds after.
const (
	retentionInterval = time.Minute
	retentionChunk    = 5000
	laneRepairEvery   = 10
)

// retentionLoop deletes archived rows, delivered keys and relays gone for a
// day past their retention every retentionInterval until ctx ends; in
// ordered mode it also repairs lanes.
func (r *Relay) retentionLoop(ctx context.Context) {
	t := time.NewTicker(retentionInterval)
	defer t.Stop()
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.enforceRetention(ctx)
			if _, err := r.pool.Exec(ctx, r.q.relaysForget, forgetAfter); err != nil && ctx.Err() == nil {
				r.log.Warn("forget relays gone for a day", "err", err)
			}
			if r.cfg.Mode == outbox.ModeOrdered && round%laneRepairEvery == 0 {
				r.repairLanes(ctx)
			}
		}
	}
}

// repairLanes opens lanes for keys that have rows but no lane
// (queryLanesRepair) and says so: such rows would wait for ever, and the
// lanes' protocol says there should be none.
func (r *Relay) repairLanes(ctx context.Context) {
	rows, err := r.pool.Query(ctx, r.q.repairLanes)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("repair lanes", "err", err)
		}
		return
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("repair lanes", "err", err)
		}
		return
	}
	if len(keys) > 0 {
		r.metrics.LanesRepaired.Add(float64(len(keys)))
		r.log.Error("opened lanes for keys whose rows had none: their rows were waiting for no claim (please report this)",
			"num_keys", len(keys), "first_key", keys[0])
	}
}

// enforceRetention deletes archived rows and delivered keys older than their
// retention, a chunk at a time so that no statement runs long. Failures are
// logged; the next round tries again.
func (r *Relay) enforceRetention(ctx context.Context) {
	for _, t := range []struct {
		table     string
		query     string
		retention time.Duration
	}{
		{"archive", r.q.deleteExpiredArchive, r.cfg.ArchiveRetention},
		{"delivered_keys", r.q.deleteExpiredKeys, r.cfg.DedupRetention},
	} {
		if t.retention < 0 {
			continue
		}
		cutoff := time.Now().Add(-t.retention)
		for ctx.Err() == nil {
			tag, err := r.pool.Exec(ctx, t.query, cutoff, retentionChunk)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("enforce retention", "table", t.table, "err", err)
				}
				break
			}
			r.metrics.RetentionDeleted.WithLabelValues(t.table).Add(float64(tag.RowsAffected()))
			if tag.RowsAffected() < retentionChunk {
				break
			}
		}
	}
}
