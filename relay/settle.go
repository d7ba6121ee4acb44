package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay/internal/keychain"
	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
)

// settler writes down the outcomes of deliveries (settle), in batches
// that grow with the load (loop), and tells the mode what was settled.
type settler struct {
	cfg      *Config
	pool     *pgxpool.Pool
	log      *slog.Logger
	metrics  *Metrics
	mode     deliveryMode
	sql      settleStatements
	health   *settleHealth
	inflight *inFlight
	chains   *keychain.Chains
}

// settleLoop writes down outcomes until in is closed. Whatever has arrived
// while the previous round trip ran is settled together, so the batch grows
// with the load and a lone outcome is settled at once. It beats live once
// per batch, and waits for outcomes as live's Wait.
func (s *settler) settleLoop(ctx context.Context, in <-chan []rowOutcome, live *liveness.Loop) {
	maxRows := 2 * s.cfg.BatchSize
	live.Wait()
	for first := range in {
		live.Beat()
		items := first
	gather:
		for len(items) < maxRows {
			select {
			case more, ok := <-in:
				if !ok {
					break gather
				}
				items = append(items, more...)
			default:
				break gather
			}
		}
		s.withRetry(ctx, items)
		s.mode.afterSettle(items)
		s.chainsSettled(items)
		var settledBytes int64
		for i := range items {
			settledBytes += int64(items[i].size)
		}
		s.inflight.addBytes(-settledBytes)
		for sink, n := range countBySink(items) {
			s.inflight.done(sink, n)
			s.metrics.InFlight.WithLabelValues(sink).Sub(float64(n))
		}
		live.Wait()
	}
}

// chainsSettled tells the chains that the rows of items were settled.
func (s *settler) chainsSettled(items []rowOutcome) {
	var links []*keychain.Link
	for i := range items {
		if items[i].link != nil {
			links = append(links, items[i].link)
		}
	}
	if len(links) > 0 {
		s.chains.Settled(links)
	}
}

// withRetry settles items, retrying while the database is unreachable
// and the leases still hold. Giving up loses nothing: the rows are claimed
// again when their leases expire. A settle refused because of what a row
// holds (settleRefusedByRow) is split until the rows it is refused for are
// alone, so that one row never keeps the others of its batch from being
// written down; those rows are reported (isolated).
func (s *settler) withRetry(ctx context.Context, items []rowOutcome) {
	giveUp := time.Now().Add(s.cfg.Lease)
	err := s.settleUntil(ctx, items, giveUp)
	switch {
	case err == nil || !settleRefusedByRow(err):
	case len(items) == 1:
		s.isolated(items[0], err)
	default:
		s.log.Warn("settle refused because of a row; settling the rows in smaller parts to find it", "num_rows", len(items), "err", err)
		s.inParts(ctx, items, giveUp)
	}
}

// settleUntil settles items, retrying errors settleUntil giveUp, but a refusal
// because of a row's content, which no retry of the same rows changes. It
// returns the last error.
func (s *settler) settleUntil(ctx context.Context, items []rowOutcome, giveUp time.Time) error {
	wait := 50 * time.Millisecond
	for {
		// A statement stuck behind a lock (an operator's open transaction,
		// an ALTER TABLE) must not hold the settler forever.
		attemptCtx, cancel := context.WithDeadline(ctx, giveUp)
		err := s.settleBatch(attemptCtx, items)
		cancel()
		if err == nil {
			s.health.recordSuccess()
			return nil
		}
		s.metrics.SettleErrors.Inc()
		s.health.recordFailure(err)
		if settleRefusedByRow(err) {
			return err
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(giveUp) {
			s.log.Error("could not settle (or could not learn whether the settle was written); the rows may be delivered again when their leases expire",
				"num_rows", len(items), "err", err)
			return err
		}
		s.log.Warn("settle failed; retrying", "num_rows", len(items), "err", err, "retry_in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// inParts settles items (two or more) in halves after a settle of them all was
// refused because of a row, halving again each part refused, down to single
// rows. A row refused on its own stays leased, is reported (an ERROR line
// naming it, outbox_relay_settle_isolated_rows_total, /readyz) and is
// delivered again when its lease expires, until what refuses it is fixed.
func (s *settler) inParts(ctx context.Context, items []rowOutcome, giveUp time.Time) {
	half := len(items) / 2
	for _, part := range [][]rowOutcome{items[:half], items[half:]} {
		err := s.settleUntil(ctx, part, giveUp)
		switch {
		case err == nil:
		case !settleRefusedByRow(err):
			return // logged; the leases expire
		case len(part) == 1:
			s.isolated(part[0], err)
		default:
			s.inParts(ctx, part, giveUp)
		}
	}
}

// isolated reports a row whose settle is refused on its own.
func (s *settler) isolated(o rowOutcome, err error) {
	s.metrics.SettleIsolated.Inc()
	s.health.rowRefused(o.id, err)
	s.log.Error("the settle of one row is refused; it stays leased and is delivered again when its lease expires, until what refuses it is fixed",
		"id", o.id, "outcome", outcomeLabel(o.kind), "sink", o.sink, "err", err)
}

// settleRefusedByRow reports whether err refuses a settle because of what
// one of its rows holds, rather than because the database is unreachable,
// busy or denies the relay: a constraint (a dead letter's id taken, a check
// or trigger a user added), a value out of range, an exception raised by a
// trigger. Splitting the batch isolates such a row; retrying the same rows
// would fail the same way.
func settleRefusedByRow(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	switch pgErr.Code[:2] {
	case "09", // triggered action exception
		"22", // data exception
		"23", // integrity constraint violation
		"27", // triggered data change violation
		"2F", // SQL routine exception
		"38", // external routine exception
		"39", // external routine invocation exception
		"54", // program limit exceeded
		"P0": // PL/pgSQL: RAISE EXCEPTION in a trigger
		return true
	}
	return false
}

// settleBatch writes the outcomes in one statement: delivered and duplicate rows
// to the archive, retried and released rows back to the queue, failed rows
// to the dead letters. It only touches rows still under the claim that
// delivered them (same claim_seq).
func (s *settler) settleBatch(ctx context.Context, items []rowOutcome) error {
	var (
		archive    archiveArgs
		requeue    requeueArgs
		deadLetter deadLetterArgs
	)
	for i := range items {
		o := &items[i]
		switch o.kind {
		case kindDelivered, kindDuplicate:
			archive.add(o)
		case kindRetry, kindRelease:
			requeue.add(o)
		case kindDead:
			deadLetter.add(o)
		}
	}

	start := time.Now()
	var archived, requeued, deadLettered, takenIDs, newIDs []int64
	args := archive.args()
	maps.Copy(args, s.mode.fenceArgs(items))
	var err error
	stmt, dest := s.sql.settle, []any{&archived, &requeued, &deadLettered, &takenIDs, &newIDs}
	if s.sql.archiveOnly != "" && len(requeue.ids) == 0 && len(deadLetter.ids) == 0 {
		// Only deliveries: the shorter statement plans faster.
		stmt, dest = s.sql.archiveOnly, []any{&archived}
	} else {
		maps.Copy(args, requeue.args())
		maps.Copy(args, deadLetter.args())
	}
	var then *pipelined
	if keys, after := deletedKeys(items); s.sql.then != "" && len(keys) > 0 {
		then = &pipelined{sql: s.sql.then, args: pgx.StrictNamedArgs{"keys": keys, "after": after}}
	}
	if err = s.inPipeline(ctx, stmt, args, dest, then); err != nil {
		return fmt.Errorf("settle %d rows: %w", len(items), err)
	}
	s.metrics.SettleDuration.Observe(time.Since(start).Seconds())

	settled := make(map[int64]bool, len(items))
	for _, ids := range [][]int64{archived, requeued, deadLettered} {
		for _, id := range ids {
			settled[id] = true
		}
	}
	if lost := len(items) - len(settled); lost > 0 {
		s.metrics.LeaseLost.Add(float64(lost))
		s.log.Warn(s.sql.dropped, "num_rows", lost, "lease", s.cfg.Lease)
	}
	s.countSettled(items, settled)
	if len(takenIDs) > 0 {
		s.metrics.DeadLettersRenumbered.Add(float64(len(takenIDs)))
		s.log.Warn("dead-lettered rows under new ids: their ids were dead letters' already (rows inserted before ids were the database's alone, or a sequence set back)",
			"ids", takenIDs, "dead_letter_ids", newIDs)
	}
	s.log.Debug("settled", "num_archived", len(archived), "num_requeued", len(requeued), "num_dead_lettered", len(deadLettered))
	return nil
}

// inPipeline runs the settle statement stmt and, when set, the
// mode's statement that follows it (settleStatements.then), in one READ
// COMMITTED transaction and one round trip (inPipeline): each statement
// takes its own snapshot, so the second sees what committed while the
// first waited on locks, whatever the database's default isolation. Both
// are prepared statements of the connection, parsed and planned once
// (querySettlePlan). Counted with callgrind on
// PostgreSQL 15 (make bench-instructions), a settle that archives 10 rows
// took 1.44 million instructions as a statement alone (planPerExecution:
// parsed, analyzed and planned at every execution) and 0.73 million so.
func (s *settler) inPipeline(ctx context.Context, stmt string, args pgx.StrictNamedArgs, dest []any, then *pipelined) error {
	stmts := []pipelined{{sql: querySettlePlan}, {sql: stmt, args: args}}
	if then != nil {
		stmts = append(stmts, *then)
	}
	return inPipeline(ctx, s.pool, "BEGIN ISOLATION LEVEL READ COMMITTED", stmts, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(dest...); err != nil {
			return err
		}
		if then == nil {
			return nil
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("after the settle: %w", err)
		}
		return nil
	})
}

// deletedKeys returns the distinct keys of the keyed rows items delete from
// the table (delivered, skipped as duplicates, dead-lettered), and the
// smallest id items delete of each. The empty key is a key.
func deletedKeys(items []rowOutcome) (keys []string, smallest []int64) {
	at := map[string]int{}
	for i := range items {
		o := &items[i]
		if !o.keyed || (o.kind != kindDelivered && o.kind != kindDuplicate && o.kind != kindDead) {
			continue
		}
		if j, ok := at[o.key]; ok {
			smallest[j] = min(smallest[j], o.id)
			continue
		}
		at[o.key] = len(keys)
		keys = append(keys, o.key)
		smallest = append(smallest, o.id)
	}
	return keys, smallest
}

// countSettled adds the outcomes that were written down to
// outbox_relay_messages_total; those a newer claim overtook are not counted.
func (s *settler) countSettled(items []rowOutcome, settled map[int64]bool) {
	type key struct {
		sink    string
		outcome string
	}
	counts := map[key]int{}
	for i := range items {
		if settled[items[i].id] {
			counts[key{items[i].sink, outcomeLabel(items[i].kind)}]++
		}
	}
	for k, n := range counts {
		s.metrics.Messages.WithLabelValues(k.sink, k.outcome).Add(float64(n))
	}
}

func countBySink(items []rowOutcome) map[string]int {
	m := map[string]int{}
	for i := range items {
		m[items[i].sink]++
	}
	return m
}

// The settle statements take one array per column.

// archiveArgs are the delivered rows and those skipped as duplicates.
type archiveArgs struct {
	ids       []int64
	seqs      []int32
	duplicate []bool
}

func (a *archiveArgs) add(o *rowOutcome) {
	a.ids = append(a.ids, o.id)
	a.seqs = append(a.seqs, o.seq)
	a.duplicate = append(a.duplicate, o.kind == kindDuplicate)
}

// requeueArgs are the rows to try again, or given back.
type requeueArgs struct {
	ids         []int64
	seqs        []int32
	delayMicros []int64
	errors      []*string
	release     []bool
}

func (a *requeueArgs) add(o *rowOutcome) {
	a.ids = append(a.ids, o.id)
	a.seqs = append(a.seqs, o.seq)
	a.delayMicros = append(a.delayMicros, o.delay.Microseconds())
	if o.kind == kindRelease {
		a.errors = append(a.errors, nil)
	} else {
		a.errors = append(a.errors, &o.err)
	}
	a.release = append(a.release, o.kind == kindRelease)
}

// deadLetterArgs are the rows for the dead letters.
type deadLetterArgs struct {
	ids     []int64
	seqs    []int32
	reasons []string
	errors  []string
}

func (a *deadLetterArgs) add(o *rowOutcome) {
	a.ids = append(a.ids, o.id)
	a.seqs = append(a.seqs, o.seq)
	a.reasons = append(a.reasons, o.reason)
	a.errors = append(a.errors, o.err)
}

func (a *archiveArgs) args() pgx.StrictNamedArgs {
	return pgx.StrictNamedArgs{"archive_ids": a.ids, "archive_seqs": a.seqs, "archive_duplicate": a.duplicate}
}

func (a *requeueArgs) args() pgx.StrictNamedArgs {
	return pgx.StrictNamedArgs{"requeue_ids": a.ids, "requeue_seqs": a.seqs, "requeue_delay_us": a.delayMicros,
		"requeue_errors": a.errors, "requeue_release": a.release}
}

func (a *deadLetterArgs) args() pgx.StrictNamedArgs {
	return pgx.StrictNamedArgs{"dead_ids": a.ids, "dead_seqs": a.seqs, "dead_reasons": a.reasons, "dead_errors": a.errors}
}
