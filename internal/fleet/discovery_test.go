package fleet

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/dbtest"
)

// likeLiteral escapes s for a LIKE pattern that matches s alone.
func likeLiteral(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// Discover finds the migrated outboxes a pattern matches, and neither a
// matching schema without the relay's tables nor one the pattern misses.
func TestDiscover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := dbtest.New(t), dbtest.New(t)
	bare := dbtest.NewEmpty(t)
	if _, err := a.Pool.Exec(ctx, "CREATE SCHEMA "+bare.Name); err != nil {
		t.Fatal(err)
	}
	prefix := a.Name[:strings.LastIndex(a.Name, "_")+1] // t_testdiscover_, shared by the three

	got, err := Discover(ctx, a.Pool, likeLiteral(prefix)+"%")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, a.Name) || !slices.Contains(got, b.Name) || slices.Contains(got, bare.Name) || !slices.IsSorted(got) {
		t.Errorf("Discover(%s%%) = %v; want %s and %s in name order, not %s (no outbox in it)", prefix, got, a.Name, b.Name, bare.Name)
	}
	got, err = Discover(ctx, a.Pool, likeLiteral(a.Name))
	if err != nil || !slices.Equal(got, []string{a.Name}) {
		t.Errorf("Discover(%s) = %v, %v; want just it", a.Name, got, err)
	}
}
