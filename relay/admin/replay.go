package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TimeColumn chooses the archive column that ReplayOptions.From and To
// bound.
type TimeColumn int

const (
	// DeliveredAt bounds the time of delivery (the default; the archive's
	// BRIN index serves it).
	DeliveredAt TimeColumn = iota
	// CreatedAt bounds the time of the original insert.
	CreatedAt
)

// ReplayOptions selects archived rows to send again.
type ReplayOptions struct {
	// From (inclusive) and To (exclusive) bound the By column; zero values
	// leave that end open.
	From, To time.Time
	By       TimeColumn
	// Topic is matched exactly, or as a LIKE pattern when it contains %;
	// a pattern that matches every topic (TopicMatchesAll) needs All.
	Topic string
	// Key is the ordering key, matched exactly.
	Key string
	// NewKeys gives every replayed row a new idempotency key
	// (gen_random_uuid()), making it a new event for every consumer. By
	// default a replay keeps the original key.
	NewKeys bool
	// All lets Replay select the whole archive when no filter is set.
	All bool
	// DryRun counts what would be replayed and changes nothing.
	DryRun bool
}

// selects reports whether o narrows the selection (a topic pattern that
// matches every topic does not).
func (o ReplayOptions) selects() bool {
	return !o.From.IsZero() || !o.To.IsZero() || topicSelects(o.Topic) || o.Key != ""
}

// args returns the arguments of queryArchiveReplay and
// queryArchiveReplayDry.
func (o ReplayOptions) args() pgx.StrictNamedArgs {
	var deliveredFrom, deliveredTo, createdFrom, createdTo any
	switch o.By {
	case CreatedAt:
		createdFrom, createdTo = nullTime(o.From), nullTime(o.To)
	default:
		deliveredFrom, deliveredTo = nullTime(o.From), nullTime(o.To)
	}
	topic, topicPattern := topicParams(o.Topic)
	return pgx.StrictNamedArgs{
		"delivered_from": deliveredFrom, "delivered_to": deliveredTo, "created_from": createdFrom, "created_to": createdTo,
		"topic": topic, "topic_pattern": topicPattern, "key": nullString(o.Key), "new_keys": o.NewKeys,
	}
}

// ReplayResult says what Replay did, or would do in a dry run.
type ReplayResult struct {
	DryRun  bool `json:"dry_run" db:"-"`
	NewKeys bool `json:"new_keys" db:"-"`
	// Matched counts the archived rows selected (duplicates excluded).
	Matched int64 `json:"matched" db:"matched"`
	// Events counts their distinct idempotency keys: a key delivered
	// several times is replayed once, from its latest delivery.
	Events int64 `json:"events" db:"events"`
	// SkippedPending events were not replayed: a row with their idempotency
	// key is pending in the hot table, so the event is on its way already.
	SkippedPending int64 `json:"skipped_pending" db:"skipped_pending"`
	// Replayed rows were inserted into the hot table.
	Replayed int64 `json:"replayed" db:"replayed"`
	// ForgottenKeys counts the delivered_keys rows deleted so that replays
	// with original keys are sent rather than archived as duplicates.
	ForgottenKeys int64 `json:"forgotten_keys" db:"forgotten_keys"`
}

// Replay inserts the archived rows opts selects into the hot table again,
// to be delivered again. Rows archived as duplicates (never sent) are not
// replayed. Each replayed row is a new row: a new id, created and due now
// (its delivery latency measures the replay, not the age of the original),
// attempts 0, with the original topic, payload, key, headers and
// destination.
//
// With original idempotency keys (the default) Replay also deletes those
// keys from delivered_keys in the same statement; consumers see the same
// message id again (Nats-Msg-Id, webhook-id), so JetStream drops the
// replay within its duplicate window and consumers that dedupe by key drop
// it too: original keys are for consumers that lost data. With NewKeys the
// replay is a new event that every consumer processes.
//
// Events whose key is pending in the hot table are skipped and counted. It
// returns ErrNoFilter when opts selects nothing and All is not set.
func (a *Admin) Replay(ctx context.Context, opts ReplayOptions) (ReplayResult, error) {
	res := ReplayResult{DryRun: opts.DryRun, NewKeys: opts.NewKeys}
	if !opts.selects() && !opts.All {
		return res, fmt.Errorf("replay: %w (set All to replay the whole archive)", ErrNoFilter)
	}
	if !opts.From.IsZero() && !opts.To.IsZero() && !opts.From.Before(opts.To) {
		return res, errors.New("replay: From must be before To")
	}
	q := a.q.archiveReplay
	if opts.DryRun {
		q = a.q.archiveReplayDry
	}
	err := inTx(ctx, a.db, mutation(opts.DryRun), func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, q, opts.args())
		var err error
		if res, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[ReplayResult]); err != nil {
			return fmt.Errorf("replay archived rows: %w", err)
		}
		res.DryRun, res.NewKeys = opts.DryRun, opts.NewKeys
		return nil
	})
	if err != nil {
		return ReplayResult{DryRun: opts.DryRun, NewKeys: opts.NewKeys}, err
	}
	// A row with the same key inserted since the judgement also skips.
	res.SkippedPending = res.Events - res.Replayed
	return res, nil
}
