package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultSchema is the schema of the outbox tables unless the relay runs with
// another RELAY_SCHEMA.
const DefaultSchema = "outbox"

// Writer inserts messages into the outbox of one schema. The zero value writes
// to DefaultSchema and fails on a pending duplicate idempotency key.
type Writer struct {
	// Schema is the relay's RELAY_SCHEMA; empty means DefaultSchema.
	Schema string
	// SkipDuplicates makes a message whose idempotency key is already pending
	// a no-op (ON CONFLICT (idempotency_key) DO NOTHING) instead of an error.
	SkipDuplicates bool
}

// Insert writes msgs into the outbox inside tx with one statement and returns
// the number of rows inserted, which is less than len(msgs) only when
// SkipDuplicates skipped some. The messages become visible to the relay when
// tx commits, together with the business change they describe.
func (w Writer) Insert(ctx context.Context, tx pgx.Tx, msgs ...Message) (int64, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	n := len(msgs)
	topics := make([]string, n)
	payloads := make([][]byte, n)
	keys := make([]*string, n)
	headers := make([]*string, n)
	idempotencyKeys := make([]*string, n)
	destinations := make([]*string, n)
	availableAt := make([]*time.Time, n)
	for i := range msgs {
		m := &msgs[i]
		if m.Topic == "" {
			return 0, fmt.Errorf("insert outbox message %d: %w", i, ErrNoTopic)
		}
		topics[i] = m.Topic
		payloads[i] = m.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
		keys[i] = nullable(m.Key)
		idempotencyKeys[i] = nullable(m.IdempotencyKey)
		destinations[i] = nullable(m.Destination)
		if !m.AvailableAt.IsZero() {
			availableAt[i] = &m.AvailableAt
		}
		if m.Headers != nil {
			b, err := json.Marshal(m.Headers)
			if err != nil {
				return 0, fmt.Errorf("insert outbox message %d: encode headers: %w", i, err)
			}
			s := string(b)
			headers[i] = &s
		}
	}
	schema := w.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	conflict := ""
	if w.SkipDuplicates {
		conflict = onConflictDoNothing
	}
	sql := fmt.Sprintf(queryMessagesInsert, pgx.Identifier{schema}.Sanitize(), conflict)
	tag, err := tx.Exec(ctx, sql, topics, payloads, keys, headers, idempotencyKeys, destinations, availableAt)
	if err != nil {
		return 0, fmt.Errorf("insert outbox messages: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Insert writes msgs into the default outbox schema inside tx; see
// Writer.Insert.
func Insert(ctx context.Context, tx pgx.Tx, msgs ...Message) error {
	_, err := Writer{}.Insert(ctx, tx, msgs...)
	return err
}

// ErrNoTopic is returned for a message without a topic.
var ErrNoTopic = errors.New("topic is required")

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
