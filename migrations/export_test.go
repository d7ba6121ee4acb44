package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MigrateTo brings schema, which must exist, to version v (a test of an
// upgrade starts from an older version).
func MigrateTo(ctx context.Context, conn *pgx.Conn, schema string, v int32) error {
	m, err := load(ctx, conn, schema)
	if err != nil {
		return err
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		return fmt.Errorf("migrate schema %s to %d: %w", schema, v, err)
	}
	return nil
}
