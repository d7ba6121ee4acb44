package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// payload is row seq's payload: a JSON object that carries seq, so that
// no two rows are alike, padded to exactly size bytes (a size under about
// 50 bytes gets the object unpadded).
func payload(seq int64, size int) []byte {
	head := `{"seq":` + strconv.FormatInt(seq, 10) + `,"kind":"yardstick","fill":"`
	const tail = `"}`
	b := make([]byte, 0, max(size, len(head)+len(tail)))
	b = append(b, head...)
	for i := range max(size-len(head)-len(tail), 0) {
		b = append(b, 'a'+byte((seq+int64(i))%26))
	}
	return append(b, tail...)
}

// headers is row seq's headers, as the relay's benchmark rows have two.
func headers(seq int64) map[string]string {
	return map[string]string{"event-type": "order.created", "trace-id": strconv.FormatInt(seq, 16)}
}

// headersJSON is headers as JSON text.
func headersJSON(seq int64) string {
	return `{"event-type": "order.created", "trace-id": "` + strconv.FormatInt(seq, 16) + `"}`
}

// preload writes the backlog with COPY in one statement. Every row is due
// before the load ends: with burst all at one timestamp, otherwise one
// microsecond apart in the order loaded.
func preload(ctx context.Context, pool *pgxpool.Pool, cfg config) error {
	var base time.Time
	if err := pool.QueryRow(ctx, "SELECT now() - $1::bigint * interval '1 microsecond'", cfg.N).Scan(&base); err != nil {
		return err
	}
	seq := int64(0)
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if seq >= int64(cfg.N) {
			return nil, nil
		}
		seq++
		due := base
		if !cfg.Burst {
			due = base.Add(time.Duration(seq) * time.Microsecond)
		}
		return []any{topic, payload(seq, cfg.PayloadBytes), headers(seq), due}, nil
	})
	n, err := pool.CopyFrom(ctx, pgx.Identifier{"outbox"}, []string{"topic", "payload", "headers", "available_at"}, src)
	if err != nil {
		return err
	}
	if n != int64(cfg.N) {
		return fmt.Errorf("copied %d rows, want %d", n, cfg.N)
	}
	return nil
}

// produce inserts cfg.N rows at cfg.Rate rows a second from cfg.Producers
// connections, cfg.ProducerBatch rows per transaction in one statement,
// and records when each row's commit returned. Transaction t starts at
// t × batch / rate seconds from the start, or at once when behind.
func produce(ctx context.Context, pool *pgxpool.Pool, cfg config, lat *latencies) error {
	perTx := cfg.ProducerBatch
	interval := time.Duration(float64(time.Second) * float64(perTx) / cfg.Rate)
	txns := (cfg.N + perTx - 1) / perTx
	begin := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Producers)
	for range cfg.Producers {
		wg.Go(func() {
			for {
				txn := int(next.Add(1) - 1)
				if txn >= txns {
					return
				}
				if err := sleepUntil(ctx, begin.Add(time.Duration(txn)*interval)); err != nil {
					errs <- err
					return
				}
				first := int64(txn*perTx + 1)
				last := min(first+int64(perTx)-1, int64(cfg.N))
				payloads := make([][]byte, 0, last-first+1)
				hdrs := make([]string, 0, last-first+1)
				for seq := first; seq <= last; seq++ {
					payloads = append(payloads, payload(seq, cfg.PayloadBytes))
					hdrs = append(hdrs, headersJSON(seq))
				}
				rows, err := pool.Query(ctx, queryOutboxInsert, pgx.NamedArgs{"topic": topic, "payloads": payloads, "headers": hdrs})
				if err != nil {
					errs <- fmt.Errorf("insert: %w", err)
					return
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					errs <- fmt.Errorf("insert: %w", err)
					return
				}
				now := time.Now()
				for _, id := range ids {
					lat.committed(id, now)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// sleepUntil returns at t, or at once when t has passed.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
