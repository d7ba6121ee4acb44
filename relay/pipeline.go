package relay

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipelined is one statement of a pipeline and its arguments (nil: none).
type pipelined struct {
	sql  string
	args pgx.StrictNamedArgs
}

// inPipeline runs stmts in one transaction on one connection of pool, in one round
// trip: begin (BEGIN, or BEGIN with an isolation level), the statements and
// COMMIT go in one pipeline. read reads the results of stmts, one each and
// in order (br.Exec, br.Query, br.QueryRow); the COMMIT's is read after it,
// so nothing a statement did is committed unless every one ran. Each
// statement still takes its own snapshot under READ COMMITTED. A
// connection left in a failed transaction is closed by the pool when
// released.
func inPipeline(ctx context.Context, pool *pgxpool.Pool, begin string, stmts []pipelined, read func(br pgx.BatchResults) error) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(begin)
	for _, s := range stmts {
		if s.args == nil {
			b.Queue(s.sql)
		} else {
			b.Queue(s.sql, s.args)
		}
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return err
	}
	if err := read(br); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
