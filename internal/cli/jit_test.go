package cli

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// The binary's connections run with PostgreSQL's JIT off, whatever the
// server's default: each new connection of the pool, not only the first.
func TestOpenPool_TurnsJITOffOnEveryConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := openPool(ctx, dbtest.URL(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var conns []interface{ Release() }
	for range 3 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var jit string
		if err := c.QueryRow(ctx, "SHOW jit").Scan(&jit); err != nil {
			t.Fatal(err)
		}
		if jit != "off" {
			t.Errorf("connection %d runs with jit = %s, want off", len(conns), jit)
		}
	}
	for _, c := range conns {
		c.Release()
	}
}
