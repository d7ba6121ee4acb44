package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimSampleEvery is how often one claim is measured: run in a
// transaction between two readings of the transaction's statistics of the
// hot table and its indexes (queryClaimStats), whose differences are the
// index entries the claim read, dead ones included, and the buffers it
// touched (outbox_relay_claim_index_entries, outbox_relay_claim_buffers).
// The other claims run in a pipeline of their own (claimInIndexOrder).
const claimSampleEvery = 10 * time.Second

// claimSampler says when the next claim is measured.
type claimSampler struct {
	mu   sync.Mutex
	next time.Time
}

// due reports whether the claim about to run at now is measured.
func (s *claimSampler) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.next) {
		return false
	}
	s.next = now.Add(claimSampleEvery)
	return true
}

// claimStats is one reading of queryClaimStats.
type claimStats struct{ entries, buffers int64 }

// claimMeasured runs the claim statement stmt as claimRows does, in a
// transaction that reads the statistics before and after it, and records
// the difference. READ COMMITTED whatever the database's default, as
// every claim (claimInIndexOrder). Rows are returned only once the
// transaction committed: until then their leases are not taken.
func (r *Relay) claimMeasured(ctx context.Context, stmt string, args pgx.StrictNamedArgs, req claimRequest) (batch []claimed, held []heldKey, err error) {
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, r.q.claimPlan); err != nil {
		return nil, nil, fmt.Errorf("set the claim's plan: %w", err)
	}
	var before, after claimStats
	if err := tx.QueryRow(ctx, r.q.claimStats).Scan(&before.entries, &before.buffers); err != nil {
		return nil, nil, fmt.Errorf("read claim statistics: %w", err)
	}
	rows, err := tx.Query(ctx, stmt, planPerExecution, args)
	if err != nil {
		return nil, nil, err
	}
	if batch, held, err = r.readClaimed(rows, req.limit); err != nil {
		return nil, nil, err
	}
	if err := tx.QueryRow(ctx, r.q.claimStats).Scan(&after.entries, &after.buffers); err != nil {
		return nil, nil, fmt.Errorf("read claim statistics: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	r.metrics.ClaimIndexEntries.Observe(float64(after.entries - before.entries))
	r.metrics.ClaimBuffers.Observe(float64(after.buffers - before.buffers))
	return batch, held, nil
}
