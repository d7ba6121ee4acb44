package relay

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The floor's rescan is its safety net for rows written without the guards
// (floor.go): every floorRescanEvery it reads the oldest row a claim may
// take and the oldest row by id (queryFloorRescan), and the next refresh
// lowers the floors to them. Lowering a floor is always safe, so the rescan
// runs beside the refreshes rather than as one of them. Under a pinned
// horizon it walks every dead entry of the due index and of the primary
// key: with the relay delivering 1,000 rows/s, 1.3 s (216k buffers) after
// two minutes of a pin and 5.7 s (893k) after ten. As one of the refreshes
// it held them up that long, and the claims walked the rows delivered
// meanwhile: in the minute of a 5.7 s rescan partitioned claims read 2.5k
// buffers, not 1.1k. It took a transaction id as well, so other relays'
// refreshes waited for it as for a writer. Now it takes none, and waits at
// least floorRescanShare times as long as the last one took, so that it
// keeps to a share of one connection's time. It follows the refreshes'
// pace: none is due until a refresh has run since the last, so an idle
// outbox, whose refreshes back off with its claims, rescans no more often
// than it refreshes.

// rescanDue reports whether a rescan is due at now, and if so marks one
// under way: the caller runs it and reports with rescanned.
func (f *claimFloor) rescanDue(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known || f.rescanning || !f.refreshed.After(f.rescanned) ||
		now.Sub(f.rescanned) < max(floorRescanEvery, floorRescanShare*f.rescanTook) {
		return false
	}
	f.rescanning = true
	return true
}

// rescanDone records a rescan that ended at now after took, and the oldest
// rows it read (nil: none, or the rescan failed), for the next refresh to
// lower the floors to.
func (f *claimFloor) rescanDone(now time.Time, took time.Duration, oldest *time.Time, oldestID *int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rescanning, f.rescanned, f.rescanTook = false, now, took
	if oldest != nil && (f.rescanAt == nil || oldest.Before(*f.rescanAt)) {
		f.rescanAt = oldest
	}
	if oldestID != nil && (f.rescanID == nil || *oldestID < *f.rescanID) {
		f.rescanID = oldestID
	}
}

// rescanLoop runs the floor's rescans until ctx ends. A failed rescan is
// logged (then reminded of, as the refreshes' failures are) and tried
// again when the next is due.
func (r *Relay) rescanLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var failing reminder
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !r.floor.rescanDue(time.Now()) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Lease)
		err := r.rescanFloor(rctx)
		cancel()
		now := time.Now()
		switch {
		case err == nil:
			if !failing.since.IsZero() {
				r.log.Info("claim floor rescans again", "failed_for", failing.end(now).Round(time.Second))
			}
		case ctx.Err() != nil:
			return
		case failing.begin(now), failing.due(now):
			r.log.Warn("rescan claim floor: rows written without the outbox's triggers wait until a rescan succeeds", "err", redactConnError(err))
		}
	}
}

// rescanFloor runs one rescan (queryFloorRescan) with the claim plan, and
// records it: a failed one too, with the time it took, so that one that
// runs out of time (a lease) under a pin is not tried again every minute,
// each try holding a snapshot for that long.
func (r *Relay) rescanFloor(ctx context.Context) error {
	began := time.Now()
	var oldest pgtype.Timestamptz
	var oldestID *int64
	args := pgx.StrictNamedArgs{
		"start":    pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true},
		"start_id": int64(math.MinInt64),
	}
	err := r.inPipeline(ctx, "BEGIN READ ONLY", []pipelined{{sql: r.q.claimPlan}, {sql: r.q.floorRescan, args: args}}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.QueryRow().Scan(&oldest, &oldestID)
	})
	if err != nil {
		r.floor.rescanDone(time.Now(), time.Since(began), nil, nil)
		return fmt.Errorf("rescan claim floor: %w", err)
	}
	var at *time.Time
	if oldest.Valid && oldest.InfinityModifier == pgtype.Finite {
		at = &oldest.Time
	}
	r.floor.rescanDone(time.Now(), time.Since(began), at, oldestID)
	return nil
}
