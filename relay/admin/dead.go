package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// DeadFilter selects dead letters. Set fields narrow the selection; an
// empty filter selects every dead letter, which RetryDead and PurgeDead
// refuse unless All is set (a Topic pattern that matches every topic, like
// %, counts as no filter: TopicMatchesAll). Dead letters are taken oldest
// failure first: by failed_at, then id.
type DeadFilter struct {
	// IDs selects dead letters by id (the row's id in the hot table).
	IDs []int64
	// Topic is matched exactly, or as a LIKE pattern when it contains %
	// (then _ matches any one character and \ escapes).
	Topic string
	// Key is the ordering key, matched exactly.
	Key string
	// Reason is matched exactly: one of outbox.Reasons (others are refused
	// with ErrUnknownReason).
	Reason string
	// Destination is matched exactly; DefaultSinkLabel selects the rows
	// without one.
	Destination string
	// Error is found anywhere in the error text, ignoring case.
	Error string
	// ErrorIs is the whole error text, matched exactly: with Reason, it
	// selects one group of DeadGroups (a cause). Empty matches any error
	// text (an empty one cannot be selected alone).
	ErrorIs string
	// Since selects dead letters that failed at or after it.
	Since time.Time
	// Until selects dead letters that failed at or before it: a dry run's
	// AsOf, so that the confirmed action acts on the letters the dry run
	// counted, not on those that failed since. It does not count as a
	// filter of its own (RetryDead and PurgeDead still want another).
	Until time.Time
	// Limit takes at most this many, oldest failure first; 0 takes all.
	Limit int
	// All lets RetryDead and PurgeDead select every dead letter when no
	// other field is set. ListDead ignores it.
	All bool
}

// selects reports whether f narrows the selection (Limit does not, nor a
// topic pattern that matches every topic).
func (f DeadFilter) selects() bool {
	return len(f.IDs) > 0 || topicSelects(f.Topic) || f.Key != "" || f.Reason != "" || f.Error != "" || f.ErrorIs != "" || !f.Since.IsZero() || f.Destination != ""
}

// ErrUnknownReason is returned for a DeadFilter.Reason that is none of
// outbox.Reasons.
var ErrUnknownReason = fmt.Errorf("unknown dead-letter reason; valid: %s", strings.Join(outbox.Reasons, ", "))

// check refuses a filter that can match nothing by mistake.
func (f DeadFilter) check() error {
	if f.Reason != "" && !slices.Contains(outbox.Reasons, f.Reason) {
		return fmt.Errorf("reason %q: %w", f.Reason, ErrUnknownReason)
	}
	return nil
}

// args returns the arguments of deadLettersMatch.
func (f DeadFilter) args() pgx.StrictNamedArgs {
	var ids any
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	topic, topicPattern := topicParams(f.Topic)
	return pgx.StrictNamedArgs{
		"ids": ids, "topic": topic, "topic_pattern": topicPattern, "key": nullString(f.Key),
		"reason": nullString(f.Reason), "error_pattern": containsPattern(f.Error), "error_is": nullString(f.ErrorIs), "since": nullTime(f.Since), "until": nullTime(f.Until),
		"limit": nullLimit(f.Limit), "destination": nullString(f.Destination),
	}
}

// DeadLetter is a message that will not be delivered without an operator.
type DeadLetter struct {
	// ID is the row's id in the hot table.
	ID    int64  `json:"id" db:"id"`
	Topic string `json:"topic" db:"topic"`
	// Key is the ordering key; empty when null.
	Key            string `json:"key" db:"key"`
	IdempotencyKey string `json:"idempotency_key" db:"idempotency_key"`
	// Destination is empty when null (the default sink).
	Destination string `json:"destination" db:"destination"`
	// Attempts counts the deliveries tried.
	Attempts int `json:"attempts" db:"attempts"`
	// Reason is why the row stopped: permanent, exhausted, no_sink or
	// cancelled.
	Reason string `json:"reason" db:"reason"`
	// Error is the last delivery error, or why the row was dead-lettered.
	Error        string    `json:"error" db:"error"`
	FailedAt     time.Time `json:"failed_at" db:"failed_at"`
	CreatedAt    time.Time `json:"created_at" db:"created_at"`
	PayloadBytes int       `json:"payload_bytes" db:"payload_bytes"`
}

// listedDeadLetter is a row of queryDeadLettersList: a dead letter, and
// how many the filter matches in all.
type listedDeadLetter struct {
	DeadLetter
	Matched int64 `db:"matched"`
}

// DeadList is a page of dead letters.
type DeadList struct {
	// Matched is how many dead letters the filter selects, ignoring Limit.
	Matched int64        `json:"matched"`
	Letters []DeadLetter `json:"dead_letters"`
}

// ListDead returns the dead letters f selects, oldest failure first (by
// failed_at, then id), without their payloads.
func (a *Admin) ListDead(ctx context.Context, f DeadFilter) (*DeadList, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	list := &DeadList{Letters: []DeadLetter{}}
	err := inTx(ctx, a.db, readOnly, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, a.q.deadLettersList, f.args())
		listed, err := pgx.CollectRows(rows, pgx.RowToStructByName[listedDeadLetter])
		if err != nil {
			return fmt.Errorf("list dead letters: %w", err)
		}
		for _, l := range listed {
			list.Letters = append(list.Letters, l.DeadLetter)
		}
		if len(listed) > 0 {
			list.Matched = listed[0].Matched
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

// RetryDeadOptions selects the dead letters to retry.
type RetryDeadOptions struct {
	DeadFilter
	// SetTopic, when set, re-routes the retried rows to this topic.
	SetTopic string
	// SetDestination, when set, re-routes the retried rows to this sink
	// (DefaultSinkLabel: the default sink, destination null).
	SetDestination string
	// DryRun counts what would be retried and changes nothing.
	DryRun bool
}

// RetryDeadResult says what RetryDead did, or would do in a dry run.
// Matched = Retried + SkippedPending + SkippedDelivered + len(Refused).
type RetryDeadResult struct {
	DryRun  bool  `json:"dry_run"`
	Matched int64 `json:"matched"`
	// Retried dead letters went back to the hot table as new rows.
	Retried int64 `json:"retried"`
	// SkippedPending dead letters stayed: a row with their idempotency key
	// is pending in the hot table (or another matched dead letter with the
	// same key, a newer one, was retried instead). Retry them after it is
	// delivered, or purge them.
	SkippedPending int64 `json:"skipped_pending"`
	// SkippedDelivered dead letters stayed because their idempotency key is
	// in delivered_keys: another row with the same key reached the
	// destination, and the relay would archive a retry as a duplicate
	// without sending it. DeliveredIDs lists them.
	SkippedDelivered int64   `json:"skipped_delivered"`
	DeliveredIDs     []int64 `json:"delivered_ids"`
	// Refused dead letters stayed because the hot table would not take
	// them back: its insert guard (or a constraint or trigger) refuses a
	// value they hold, like headers over the budget. Each is named with
	// the refusal; fix or purge them. A dry run does not insert, so it
	// finds none.
	Refused []RefusedDeadLetter `json:"refused,omitempty"`
	// AsOf is the database's time of a dry run: give it as Until to act
	// on the dead letters the dry run counted and no others.
	AsOf time.Time `json:"as_of,omitzero"`
}

// RefusedDeadLetter is a dead letter RetryDead left in place because the
// hot table refused it.
type RefusedDeadLetter struct {
	ID int64 `json:"id"`
	// Reason is PostgreSQL's refusal, like "outbox: headers must be at
	// most 16384 bytes of JSON, not 20012".
	Reason string `json:"reason"`
}

// RetryDead moves the dead letters opts selects back to the hot table: each
// becomes a new row (a new id from the identity) with attempts 0, due now,
// without lease or last error, and with its original payload, headers, key,
// idempotency key and destination. Its created_at is the retry's time: the
// insert guard sets created_at on every insert, so that no insert can
// forge it, and the delivery latency of a retried row counts from the
// retry. A retried row gets a new id, so in per-key order it goes after
// rows of its key inserted since.
//
// Dead letters whose idempotency key is pending or was delivered are left
// where they are and counted. Dead letters the hot table refuses (its
// insert guard refuses a value one holds, like headers over the budget)
// are left where they are and listed in Refused, each with the refusal;
// the others are retried. It returns ErrNoFilter when opts selects
// nothing and All is not set.
func (a *Admin) RetryDead(ctx context.Context, opts RetryDeadOptions) (RetryDeadResult, error) {
	res := RetryDeadResult{DryRun: opts.DryRun}
	if err := opts.check(); err != nil {
		return res, err
	}
	if !opts.selects() && !opts.All {
		return res, fmt.Errorf("retry dead letters: %w (set All to retry every dead letter)", ErrNoFilter)
	}
	err := inTx(ctx, a.db, mutation(opts.DryRun), func(tx pgx.Tx) error {
		if opts.DryRun {
			rows, _ := tx.Query(ctx, a.q.deadLettersRetryDry, opts.args())
			m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[retryDeadMoved])
			if err != nil {
				return fmt.Errorf("retry dead letters: %w", err)
			}
			res.Matched, res.Retried, res.DeliveredIDs, res.AsOf = m.Matched, m.Retried, m.Delivered, m.AsOf
			return nil
		}
		// All at once; when the hot table refuses one of them, the whole
		// statement fails, and they go one at a time to find which.
		m, err := a.retryDeadMove(ctx, tx, opts.DeadFilter, opts)
		if err == nil {
			res.Matched, res.Retried, res.DeliveredIDs = m.Matched, m.Retried, m.Delivered
			return nil
		}
		if _, ok := refusal(err); !ok {
			return fmt.Errorf("retry dead letters: %w", err)
		}
		return a.retryDeadEach(ctx, tx, opts, &res)
	})
	if err != nil {
		return RetryDeadResult{DryRun: opts.DryRun}, err
	}
	res.SkippedDelivered = int64(len(res.DeliveredIDs))
	res.SkippedPending = res.Matched - res.Retried - res.SkippedDelivered - int64(len(res.Refused))
	return res, nil
}

// retryDeadMoved is what one queryDeadLettersRetry did (or
// queryDeadLettersRetryDry would do): the dead letters matched, those
// moved, and the ids of those left because their key was delivered.
type retryDeadMoved struct {
	Matched   int64   `db:"matched"`
	Retried   int64   `db:"retried"`
	Delivered []int64 `db:"delivered_ids"`
	// AsOf is the database's time of a dry run (queryDeadLettersRetryDry
	// only).
	AsOf time.Time `db:"as_of"`
}

// retryDeadMove runs queryDeadLettersRetry for the dead letters f selects,
// re-routed as opts says, in a savepoint of tx: when it fails, tx goes on
// as before it.
func (a *Admin) retryDeadMove(ctx context.Context, tx pgx.Tx, f DeadFilter, opts RetryDeadOptions) (retryDeadMoved, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return retryDeadMoved{}, fmt.Errorf("savepoint: %w", err)
	}
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }()
	args := f.args()
	args["set_topic"], args["set_destination"] = nullString(opts.SetTopic), nullString(opts.SetDestination)
	rows, _ := sp.Query(ctx, a.q.deadLettersRetry, args)
	m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[retryDeadMoved])
	if err != nil {
		return retryDeadMoved{}, err
	}
	if err := sp.Commit(ctx); err != nil {
		return retryDeadMoved{}, fmt.Errorf("release savepoint: %w", err)
	}
	return m, nil
}

// retryDeadEach retries the dead letters opts selects one at a time, in
// the order a retry of all of them inserts them, and notes in res those
// the hot table refuses, with the refusal.
func (a *Admin) retryDeadEach(ctx context.Context, tx pgx.Tx, opts RetryDeadOptions, res *RetryDeadResult) error {
	// judged is a dead letter and its verdict.
	type judged struct {
		ID      int64  `db:"id"`
		Verdict string `db:"verdict"`
	}
	rows, _ := tx.Query(ctx, a.q.deadLettersRetryJudged, opts.args())
	all, err := pgx.CollectRows(rows, pgx.RowToStructByName[judged])
	if err != nil {
		return fmt.Errorf("judge dead letters: %w", err)
	}
	res.Matched = int64(len(all))
	for _, j := range all {
		switch j.Verdict {
		case "delivered":
			res.DeliveredIDs = append(res.DeliveredIDs, j.ID)
			continue
		case "pending":
			continue
		}
		m, err := a.retryDeadMove(ctx, tx, DeadFilter{IDs: []int64{j.ID}}, opts)
		if err != nil {
			reason, ok := refusal(err)
			if !ok {
				return fmt.Errorf("retry dead letter %d: %w", j.ID, err)
			}
			res.Refused = append(res.Refused, RefusedDeadLetter{ID: j.ID, Reason: reason})
			continue
		}
		res.Retried += m.Retried
		res.DeliveredIDs = append(res.DeliveredIDs, m.Delivered...)
	}
	return nil
}

// refusal returns PostgreSQL's message when err is the database refusing a
// row for what it holds (the insert guard's RAISE, a constraint, a value
// out of range or too large for an index), rather than failing for every
// row; ok is false otherwise.
func refusal(err error) (reason string, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return "", false
	}
	switch pgErr.Code[:2] {
	case "09", // triggered action exception
		"22", // data exception
		"23", // integrity constraint violation: the guard's check_violation
		"27", // triggered data change violation
		"54", // program limit exceeded: an index row too large
		"P0": // PL/pgSQL: RAISE EXCEPTION in a trigger
		return pgErr.Message, true
	}
	return "", false
}

// PurgeDeadOptions selects the dead letters to delete.
type PurgeDeadOptions struct {
	DeadFilter
	// DryRun counts what would be deleted and changes nothing.
	DryRun bool
}

// PurgeDeadResult says how many dead letters PurgeDead deleted, or would
// delete in a dry run.
type PurgeDeadResult struct {
	DryRun bool  `json:"dry_run" db:"-"`
	Purged int64 `json:"purged" db:"purged"`
	// AsOf is the database's time of a dry run: give it as Until to act
	// on the dead letters the dry run counted and no others.
	AsOf time.Time `json:"as_of,omitzero" db:"as_of"`
}

// PurgeDead deletes the dead letters opts selects. It returns ErrNoFilter
// when opts selects nothing and All is not set.
func (a *Admin) PurgeDead(ctx context.Context, opts PurgeDeadOptions) (PurgeDeadResult, error) {
	res := PurgeDeadResult{DryRun: opts.DryRun}
	if err := opts.check(); err != nil {
		return res, err
	}
	if !opts.selects() && !opts.All {
		return res, fmt.Errorf("purge dead letters: %w (set All to purge every dead letter)", ErrNoFilter)
	}
	err := inTx(ctx, a.db, mutation(opts.DryRun), func(tx pgx.Tx) error {
		if opts.DryRun {
			rows, _ := tx.Query(ctx, a.q.deadLettersPurgeDry, opts.args())
			counted, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[PurgeDeadResult])
			if err != nil {
				return fmt.Errorf("count dead letters: %w", err)
			}
			res.Purged, res.AsOf = counted.Purged, counted.AsOf
			return nil
		}
		tag, err := tx.Exec(ctx, a.q.deadLettersPurge, opts.args())
		if err != nil {
			return fmt.Errorf("purge dead letters: %w", err)
		}
		res.Purged = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return PurgeDeadResult{DryRun: opts.DryRun}, err
	}
	return res, nil
}
