package admin

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// KeyHistoryDefault is how many rows KeyHistory returns unless told.
const KeyHistoryDefault = 200

// Where a row of a key is now (KeyRow.Where). In the hot table the
// definitions are Status's; in ordered mode a row behind an older row of
// its key is listed as pending (or delayed) although it waits for that row,
// which the history lists before it.
const (
	// KeyPending rows are in the hot table, due and not leased.
	KeyPending = "pending"
	// KeyInFlight rows are in the hot table under a running lease: a relay
	// is delivering them.
	KeyInFlight = "in flight"
	// KeyBackoff rows are in the hot table, failed, and wait for their
	// retry.
	KeyBackoff = "backoff"
	// KeyDelayed rows are in the hot table, never tried, and wait for
	// their available_at.
	KeyDelayed = "delayed"
	// KeyDelivered rows were delivered and archived.
	KeyDelivered = "delivered"
	// KeyDeduplicated rows were archived without being sent: their
	// idempotency key had been delivered (the archive's duplicate).
	KeyDeduplicated = "deduplicated"
	// KeyDead rows are dead letters.
	KeyDead = "dead letter"
)

// KeyRow is one row with the key, wherever it is now.
type KeyRow struct {
	// ID is the row's id in the hot table (its id in the archive and the
	// dead letters too); ids grow with insertion.
	ID int64 `json:"id" db:"id"`
	// Where is where the row is now: one of the Key… constants.
	Where          string `json:"where" db:"where"`
	Topic          string `json:"topic" db:"topic"`
	IdempotencyKey string `json:"idempotency_key" db:"idempotency_key"`
	// Destination is empty when null (the default sink).
	Destination string `json:"destination" db:"destination"`
	// Attempts counts the deliveries tried.
	Attempts  int       `json:"attempts" db:"attempts"`
	CreatedAt time.Time `json:"created_at" db:"created_at"`
	// At is when the row is due or retried (available_at) in the hot
	// table, when it was archived (delivered_at), or when it failed for
	// good (a dead letter's failed_at).
	At *time.Time `json:"at,omitempty" db:"at"`
	// Error is the last delivery error of a row in the hot table, or the
	// error of a dead letter; Reason is a dead letter's reason.
	Error  string `json:"error,omitempty" db:"error"`
	Reason string `json:"reason,omitempty" db:"reason"`
	// LeasedBy is, in the hot table, the relay whose lease the row holds
	// or last held.
	LeasedBy     string `json:"leased_by,omitempty" db:"leased_by"`
	PayloadBytes int    `json:"payload_bytes" db:"payload_bytes"`
}

// KeyHistory is what happened to the rows of one ordering key: "what
// happened to order 42".
type KeyHistory struct {
	Key string `json:"key"`
	// At is the database's clock when the rows were read.
	At time.Time `json:"at"`
	// Rows are the key's newest rows in the hot table, the archive and the
	// dead letters, oldest (lowest id) first.
	Rows []KeyRow `json:"rows"`
	// More is set when older rows of the key exist than those listed.
	More bool `json:"more"`
}

// KeyHistory returns the newest limit rows (limit 0 or less:
// KeyHistoryDefault) with the ordering key key in the hot table, the
// archive (within its retention) and the dead letters, oldest first, each
// with where it is now. Each table is read by its (key, id) index, newest
// first, for limit + 1 rows at most, so its cost follows limit, not the
// tables' sizes.
func (a *Admin) KeyHistory(ctx context.Context, key string, limit int) (*KeyHistory, error) {
	if limit <= 0 {
		limit = KeyHistoryDefault
	}
	h := &KeyHistory{Key: key, Rows: []KeyRow{}}
	err := inTx(ctx, a.db, readOnly, func(tx pgx.Tx) error {
		// The clock, from queryRelayMode: the history holds no row when
		// the key has none.
		var mode []schemaMode
		b := &pgx.Batch{}
		collect(b, &mode, "the clock", a.q.relayMode)
		collect(b, &h.Rows, "the key's rows", a.q.keyHistory, pgx.StrictNamedArgs{"key": key, "limit": limit})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("read the history of key %q: %w", key, err)
		}
		if len(mode) != 1 {
			return fmt.Errorf("read the clock: %d rows in relay_mode, want 1", len(mode))
		}
		h.At = mode[0].At
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Newest first, one more than asked when older rows exist.
	if len(h.Rows) > limit {
		h.Rows, h.More = h.Rows[:limit], true
	}
	slices.Reverse(h.Rows)
	return h, nil
}
