package admin

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// CancelError is the error text of a cancelled row in the dead letters.
const CancelError = "cancelled by operator"

// CancelOptions selects pending rows to cancel; Key or Topic is required,
// and when both are set a row must match both.
type CancelOptions struct {
	// Key is the ordering key, matched exactly.
	Key string
	// Topic is matched exactly, or as a LIKE pattern when it contains %;
	// a pattern that matches every topic (TopicMatchesAll) does not count
	// as the required filter.
	Topic string
	// DryRun counts what would be cancelled and changes nothing.
	DryRun bool
}

// CancelResult says what Cancel did, or would do in a dry run.
type CancelResult struct {
	DryRun  bool  `json:"dry_run" db:"-"`
	Matched int64 `json:"matched" db:"matched"`
	// Cancelled rows moved to the dead letters (reason cancelled).
	Cancelled int64 `json:"cancelled" db:"cancelled"`
	// InFlight rows were left alone: a relay holds them under a running
	// lease (or was committing its claim) and may be delivering them right
	// now. Cancel again after RELAY_LEASE; a row delivered meanwhile is in
	// the archive instead.
	InFlight int64 `json:"in_flight" db:"in_flight"`
}

// cancelled is what queryMessagesCancel returns: the rows matched and
// moved, and the keys of the rows moved.
type cancelled struct {
	Matched   int64    `db:"matched"`
	Cancelled int64    `db:"cancelled"`
	Keys      []string `db:"keys"`
}

// args returns the arguments of messagesCancelMatch.
func (o CancelOptions) args() pgx.StrictNamedArgs {
	topic, topicPattern := topicParams(o.Topic)
	return pgx.StrictNamedArgs{"key": nullString(o.Key), "topic": topic, "topic_pattern": topicPattern}
}

// Cancel moves the pending rows opts selects from the hot table to the
// dead letters, with reason outbox.ReasonCancelled and error CancelError,
// keeping their id, attempts and created_at. Rows in flight are left
// alone; a relay whose lease had expired and that settles a cancelled row
// late finds it gone, and its settle does nothing. RetryDead with Reason
// "cancelled" undoes a cancel.
func (a *Admin) Cancel(ctx context.Context, opts CancelOptions) (CancelResult, error) {
	res := CancelResult{DryRun: opts.DryRun}
	if opts.Key == "" && !topicSelects(opts.Topic) {
		return res, fmt.Errorf("cancel: %w (name a key or a topic)", ErrNoFilter)
	}
	txOpts := mutation(opts.DryRun)
	if !opts.DryRun {
		// The promotion below needs a snapshot of its own, taken after
		// the delete (ordered mode's protocol, relay/sql_heads.go).
		txOpts.IsoLevel = pgx.ReadCommitted
	}
	err := inTx(ctx, a.db, txOpts, func(tx pgx.Tx) error {
		if opts.DryRun {
			rows, _ := tx.Query(ctx, a.q.messagesCancelDry, opts.args())
			var err error
			if res, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[CancelResult]); err != nil {
				return fmt.Errorf("count rows to cancel: %w", err)
			}
			res.DryRun = true
			return nil
		}
		// No rotation carry moves a row between generations while the
		// delete looks for it (queryRotationShared).
		if _, err := tx.Exec(ctx, a.q.rotationShared); err != nil {
			return fmt.Errorf("cancel rows: wait for the hot table's rotation: %w", err)
		}
		args := opts.args()
		args["reason"], args["error"] = outbox.ReasonCancelled, CancelError
		rows, _ := tx.Query(ctx, a.q.messagesCancel, args)
		c, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[cancelled])
		if err != nil {
			return fmt.Errorf("cancel rows: %w", err)
		}
		// Ordered mode: the next rows of the cancelled keys may be their
		// heads now.
		if _, err := tx.Exec(ctx, a.q.keysPromote, pgx.StrictNamedArgs{"keys": c.Keys}); err != nil {
			return fmt.Errorf("cancel rows: make the next rows of their keys claimable: %w", err)
		}
		res.Matched, res.Cancelled, res.InFlight = c.Matched, c.Cancelled, c.Matched-c.Cancelled
		return nil
	})
	if err != nil {
		return CancelResult{DryRun: opts.DryRun}, err
	}
	return res, nil
}
