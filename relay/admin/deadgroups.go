package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeadGroupsDefault is how many groups DeadGroups lists unless told.
const DeadGroupsDefault = 50

// DeadGroup is the dead letters of one cause: one reason and one error
// text. DeadFilter{Reason: g.Reason, ErrorIs: g.Error} selects them, for
// ListDead, RetryDead and PurgeDead.
type DeadGroup struct {
	Reason string `json:"reason" db:"reason"`
	Error  string `json:"error" db:"error"`
	Count  int64  `json:"count" db:"count"`
	// FirstFailedAt and LastFailedAt are the earliest and the latest
	// failed_at among them.
	FirstFailedAt time.Time `json:"first_failed_at" db:"first_failed_at"`
	LastFailedAt  time.Time `json:"last_failed_at" db:"last_failed_at"`
	// Topics counts their distinct topics.
	Topics int64 `json:"topics" db:"topics"`
	// ExampleID is the id of the newest of them: the one that failed
	// last (of those that failed at LastFailedAt, the highest id).
	ExampleID int64 `json:"example_id" db:"example_id"`
}

// DeadGroups is the dead letters grouped by cause.
type DeadGroups struct {
	// Total counts every dead letter, and Groups every group, listed or
	// not.
	Total  int64 `json:"total"`
	Groups int64 `json:"groups"`
	// Listed are the largest groups, most numerous first (ties: the latest
	// failure first).
	Listed []DeadGroup `json:"listed"`
}

// listedDeadGroup is a row of queryDeadLettersGroups: a group, and the
// dead letters and groups in all.
type listedDeadGroup struct {
	DeadGroup
	Total  int64 `db:"total"`
	Groups int64 `db:"groups"`
}

// DeadGroups returns the dead letters grouped by cause (reason and error
// text), the limit most numerous groups first, ties by latest failure;
// limit 0 or less lists DeadGroupsDefault. It is one statement, which
// reads the dead letters once (36 ms for 100,000 of them on a test
// machine).
func (a *Admin) DeadGroups(ctx context.Context, limit int) (*DeadGroups, error) {
	if limit <= 0 {
		limit = DeadGroupsDefault
	}
	groups := &DeadGroups{Listed: []DeadGroup{}}
	err := inTx(ctx, a.db, readOnly, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, a.q.deadLettersGroups, pgx.StrictNamedArgs{"limit": limit})
		listed, err := pgx.CollectRows(rows, pgx.RowToStructByName[listedDeadGroup])
		if err != nil {
			return fmt.Errorf("group dead letters: %w", err)
		}
		for _, g := range listed {
			groups.Listed = append(groups.Listed, g.DeadGroup)
		}
		if len(listed) > 0 {
			groups.Total, groups.Groups = listed[0].Total, listed[0].Groups
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return groups, nil
}
