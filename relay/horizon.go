package relay

import (
	"context"
	"fmt"
)

// timedHolder reports whether the holder's transactions have a start time:
// a replication slot or a standby's feedback has an xmin and no start.
func timedHolder(holder string) bool { return holder != "replication" }

// refreshHorizon sets the oldest-snapshot gauges from queryHorizonAge: how
// old, in seconds and in transactions, the oldest holder of the database's
// xmin horizon is. Every delivered row leaves a dead tuple and dead index
// entries in the hot table; VACUUM removes them only once no snapshot older
// than the delete remains, so while a snapshot is held open (a report, a
// forgotten BEGIN in psql, a prepared transaction, a standby's feedback)
// they pile up on the claims' path and every claim slows down. The first
// time it finds that the relay's role cannot see the start of other roles'
// sessions (no pg_read_all_stats), it says so once, at warn.
func (r *Relay) refreshHorizon(ctx context.Context) error {
	rows, err := r.pool.Query(ctx, r.q.horizonAge)
	if err != nil {
		return fmt.Errorf("read the xmin horizon: %w", err)
	}
	defer rows.Close()
	seesAll := true
	for rows.Next() {
		var holder string
		var seconds float64
		var xids int64
		var all bool
		if err := rows.Scan(&holder, &seconds, &xids, &all); err != nil {
			return fmt.Errorf("read the xmin horizon: %w", err)
		}
		if timedHolder(holder) {
			r.metrics.OldestSnapshotAge.WithLabelValues(holder).Set(max(seconds, 0))
		}
		r.metrics.OldestXminAge.WithLabelValues(holder).Set(float64(max(xids, 0)))
		seesAll = seesAll && all
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the xmin horizon: %w", err)
	}
	if !seesAll && r.horizonWarned.CompareAndSwap(false, true) {
		r.log.Warn("the relay's database role cannot see when other roles' transactions started: "+
			"outbox_relay_oldest_snapshot_age_seconds times only its own sessions' (outbox_relay_oldest_xmin_age_transactions sees every one); "+
			"grant pg_read_all_stats to the role for the age of every snapshot that holds back vacuum (docs/security.md)",
			"metric", "outbox_relay_oldest_snapshot_age_seconds", "needs", "pg_read_all_stats")
	}
	return nil
}
