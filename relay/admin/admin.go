// Package admin inspects and repairs the relay's tables from the database
// alone: it works while no relay runs, and beside running relays.
//
// New returns an Admin for one schema, whose methods are the operations:
// Status summarises the hot table, the leases, the dead letters and the
// tables' sizes; ListDead, RetryDead and PurgeDead look at, move back and
// delete dead letters; Replay re-enqueues archived (delivered) rows; Cancel
// moves pending rows to the dead letters.
//
// Every mutating operation is one statement in one transaction. Where it
// takes rows from the hot table or the dead letters it locks them with FOR
// UPDATE SKIP LOCKED, so it never waits for a relay's claim nor makes one
// wait, and it never touches a row under a running lease: a relay settles
// only rows still under its claim (the row's claim_seq, which every claim
// increments), so its late settle of a row an operator moved is a no-op. Dry runs (DryRun) run a read-only
// transaction that counts what the operation would touch.
//
// Operations that move or delete rows refuse to run without a filter
// (ErrNoFilter) unless the options say All.
package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Admin runs the operator's operations on the relay's tables in one schema.
// It is safe for concurrent use.
type Admin struct {
	db     DB
	schema string
	// q holds the statements, rendered for schema.
	q queries
}

// New returns the operations on the relay's tables in schema (RELAY_SCHEMA),
// reached through db. It validates the schema name but does not touch the
// database.
func New(db DB, schema string) (*Admin, error) {
	if err := outbox.ValidateSchema(schema); err != nil {
		return nil, err
	}
	return &Admin{db: db, schema: schema, q: renderQueries(schema)}, nil
}

// DB is the database handle the operations need; *pgxpool.Pool and
// *pgx.Conn satisfy it. Each operation runs in one transaction of its own.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
)

// ErrNoFilter is returned by operations that move or delete rows when no
// filter selects them and All is not set: selecting everything must be
// explicit.
var ErrNoFilter = errors.New("no filter given")

// readOnly is how status, listings and dry runs read: one snapshot, no
// writes.
var readOnly = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// inTx runs f in a transaction with opts and commits it when f succeeds.
func inTx(ctx context.Context, db DB, opts pgx.TxOptions, f func(pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// mutation returns the transaction options of an operation: read-only for
// a dry run.
func mutation(dryRun bool) pgx.TxOptions {
	if dryRun {
		return readOnly
	}
	return pgx.TxOptions{}
}

// TopicMatchesAll reports whether the topic filter topic is a LIKE pattern
// of wildcards alone (%, %%, _%, …), which matches every topic. Such a
// filter selects nothing in particular: the operations that move or delete
// rows treat it as no filter, so that --topic % cannot purge, retry, replay
// or cancel everything without All.
func TopicMatchesAll(topic string) bool {
	if !strings.Contains(topic, "%") {
		return false
	}
	return strings.Trim(topic, "%_") == ""
}

// topicSelects reports whether the topic filter topic narrows a selection.
func topicSelects(topic string) bool {
	return topic != "" && !TopicMatchesAll(topic)
}

// topicParams splits a topic filter into an exact match and a LIKE pattern:
// a topic containing % is a pattern (where _ also matches any character and
// \ escapes), any other is matched exactly. Both are nil when topic is
// empty.
func topicParams(topic string) (exact, pattern any) {
	switch {
	case topic == "":
		return nil, nil
	case strings.Contains(topic, "%"):
		return nil, topic
	default:
		return topic, nil
	}
}

// containsPattern returns an ILIKE pattern that matches text anywhere, with
// its wildcards escaped, or nil when text is empty.
func containsPattern(text string) any {
	if text == "" {
		return nil
	}
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(text) + "%"
}

// nullString is s, or nil (SQL NULL) when s is empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullTime is t, or nil (SQL NULL) when t is zero.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// nullLimit is n, or nil (no limit) when n is 0 or less.
func nullLimit(n int) any {
	if n <= 0 {
		return nil
	}
	return n
}
