// Package sampler measures one claim every so often: what the claim read
// of the hot table and its indexes, dead index entries included, and the
// buffers it touched, which is how a pinned MVCC horizon shows in the
// claims (outbox_relay_claim_index_entries, outbox_relay_claim_buffers).
//
// A measured claim runs in a transaction between two readings of the
// transaction's statistics of the table and its indexes (Statement): their
// differences are the claim's. The other claims run as they always do (in
// a pipeline of their own), so measuring costs two statements every Every.
// It is the engine's rule without a Run: nothing runs in the background, a
// claim asks Due before it runs, and Measure reports through Hooks once
// the claim's transaction committed. It imports nothing of the relay's
// (docs/development.md, The engine's rule).
package sampler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// EveryDefault is how often a claim is measured unless Config.Every says.
const EveryDefault = 10 * time.Second

// Hooks report the measured claims. Every field is optional.
type Hooks struct {
	// Measured learns what a measured claim read: index entries, dead ones
	// included, and buffers.
	Measured func(entries, buffers int64)
}

// Config configures a Sampler.
type Config struct {
	// QuotedSchema is the outbox's schema, quoted (Statement).
	QuotedSchema string
	// Every is how often a claim is measured (0: EveryDefault).
	Every time.Duration
	Hooks Hooks
}

// Sampler says which claims are measured (Due) and measures them
// (Measure). It is safe for concurrent use.
type Sampler struct {
	cfg   Config
	stats string
	mu    sync.Mutex
	next  time.Time
}

// New returns a sampler whose next claim is measured.
func New(cfg Config) *Sampler {
	if cfg.Every == 0 {
		cfg.Every = EveryDefault
	}
	if cfg.Hooks.Measured == nil {
		cfg.Hooks.Measured = func(int64, int64) {}
	}
	return &Sampler{cfg: cfg, stats: Statement(cfg.QuotedSchema)}
}

// Due reports whether the claim about to run at now is measured, and if
// so counts it as the one of its interval.
func (s *Sampler) Due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.next) {
		return false
	}
	s.next = now.Add(s.cfg.Every)
	return true
}

// Measure runs claim in tx between two readings of the statistics, and
// commits tx: the rows claim leased are the caller's only once Measure
// returned nil. Hooks.Measured learns the differences after the commit.
func (s *Sampler) Measure(ctx context.Context, tx pgx.Tx, claim func() error) error {
	var before, after reading
	if err := tx.QueryRow(ctx, s.stats).Scan(&before.entries, &before.buffers); err != nil {
		return fmt.Errorf("read claim statistics: %w", err)
	}
	if err := claim(); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, s.stats).Scan(&after.entries, &after.buffers); err != nil {
		return fmt.Errorf("read claim statistics: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.cfg.Hooks.Measured(after.entries-before.entries, after.buffers-before.buffers)
	return nil
}

// reading is one reading of the statistics.
type reading struct{ entries, buffers int64 }

// queryStats reads the current transaction's statistics of the hot table
// and its indexes: the index entries its scans read, dead ones included,
// and the buffers they touched, summed over every generation's table
// (message_generations, migration 24: the claims read them all, through
// messages_all, which holds no row and has no index).
const queryStats = `
SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::bigint,
       (coalesce((SELECT sum(pg_stat_get_xact_blocks_fetched(g.relid)) FROM {schema}.message_generations AS g), 0)
        + coalesce(sum(pg_stat_get_xact_blocks_fetched(i.indexrelid)), 0))::bigint
  FROM pg_index AS i
 WHERE i.indrelid IN (SELECT g.relid FROM {schema}.message_generations AS g)`

// Statement returns the statistics' reading for the schema quotedSchema.
func Statement(quotedSchema string) string {
	return strings.ReplaceAll(queryStats, "{schema}", quotedSchema)
}
