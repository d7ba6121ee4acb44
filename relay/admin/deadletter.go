package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PreviewBytesDefault is how much of a dead letter's payload DeadLetter
// returns unless told.
const PreviewBytesDefault = 4096

// previewBytesMax bounds DeadLetter's preview: PostgreSQL holds no value
// over 1 GiB, and substring takes a 32-bit length.
const previewBytesMax = 1 << 30

// ErrNotFound is returned, wrapped with what was looked up, when no row
// answers a lookup: DeadLetter's id.
var ErrNotFound = errors.New("not found")

// DeadLetterDetail is one dead letter with what ListDead leaves out: its
// headers, its available_at and the start of its payload.
type DeadLetterDetail struct {
	DeadLetter
	// Headers are the row's headers, nil when it has none (null). The
	// dead letters' headers may hold any JSON, written by hand: a value
	// that is not a string is read as its JSON text (a number 1 as "1",
	// null as "null"), and headers that are not a JSON object as one
	// entry named "" holding their text.
	Headers map[string]string `json:"headers" db:"headers"`
	// FirstError is the row's first delivery error, when it failed more
	// than once (migration 20; empty for letters dead-lettered on their
	// only failure, and for those of earlier versions). Error is the last.
	FirstError string `json:"first_error,omitempty" db:"first_error"`
	// AvailableAt is, for a cancelled row, when it was due (RetryDead puts
	// it back delayed while that is ahead); nil for others.
	AvailableAt *time.Time `json:"available_at,omitempty" db:"available_at"`
	// Payload is the payload's first bytes, at most the preview asked for,
	// as stored; PayloadTruncated is set when the payload is longer
	// (PayloadBytes says how long).
	Payload          []byte `json:"payload" db:"payload"`
	PayloadTruncated bool   `json:"payload_truncated" db:"payload_truncated"`
}

// DeadLetter returns the dead letter id with its headers and the first
// previewBytes of its payload (previewBytes 0 or less: PreviewBytesDefault),
// cut by PostgreSQL: a payload of hundreds of MiB is not read whole nor
// sent. It returns ErrNotFound, wrapped with the id, when there is no such
// dead letter (retried, purged, or never one).
func (a *Admin) DeadLetter(ctx context.Context, id int64, previewBytes int) (*DeadLetterDetail, error) {
	if previewBytes <= 0 {
		previewBytes = PreviewBytesDefault
	}
	previewBytes = min(previewBytes, previewBytesMax)
	var d *DeadLetterDetail
	err := inTx(ctx, a.db, readOnly, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, a.q.deadLetterDetail, pgx.StrictNamedArgs{"id": id, "preview": previewBytes})
		var err error
		d, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[DeadLetterDetail])
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("dead letter %d: %w", id, ErrNotFound)
		case err != nil:
			return fmt.Errorf("read dead letter %d: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}
