package fleet

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// likeLiteral escapes s for a LIKE pattern that matches s alone.
func likeLiteral(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// names returns the schemas of found, and those of them that are trusted.
func names(found []Found) (all, trusted []string) {
	for _, f := range found {
		all = append(all, f.Schema)
		if f.Trusted {
			trusted = append(trusted, f.Schema)
		}
	}
	return all, trusted
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

	found, err := Discover(ctx, a.Pool, likeLiteral(prefix)+"%", Trust{})
	if err != nil {
		t.Fatal(err)
	}
	got, trusted := names(found)
	if !slices.Contains(got, a.Name) || !slices.Contains(got, b.Name) || slices.Contains(got, bare.Name) || !slices.IsSorted(got) {
		t.Errorf("Discover(%s%%) = %v; want %s and %s in name order, not %s (no outbox in it)", prefix, got, a.Name, b.Name, bare.Name)
	}
	if !slices.Equal(got, trusted) {
		t.Errorf("Discover(%s%%) trusts %v of %v: want every schema the role it connects as owns", prefix, trusted, got)
	}
	found, err = Discover(ctx, a.Pool, likeLiteral(a.Name), Trust{})
	if got, _ := names(found); err != nil || !slices.Equal(got, []string{a.Name}) {
		t.Errorf("Discover(%s) = %v, %v; want just it", a.Name, got, err)
	}
}

// Discover trusts a matched schema only when both it and its messages table
// are owned by a trusted owner: by default the role it connects as and the
// owners of the listed schemas, or the roles Trust.Owners names.
func TestTrust_DiscoverTrustsOnlyTheOwnersItIsTold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mine, theirs, table := dbtest.New(t), dbtest.New(t), dbtest.New(t)
	other := dbtest.NewRole(t, "other")
	quoted := pgx.Identifier{other.Name}.Sanitize()
	mine.Exec(t, "ALTER SCHEMA "+pgx.Identifier{theirs.Name}.Sanitize()+" OWNER TO "+quoted)
	mine.Exec(t, "ALTER TABLE "+table.Table("messages")+" OWNER TO "+quoted)
	t.Cleanup(func() { // before the role is dropped with what it owns
		mine.Exec(t, "ALTER SCHEMA "+pgx.Identifier{theirs.Name}.Sanitize()+" OWNER TO CURRENT_USER")
		mine.Exec(t, "ALTER TABLE "+table.Table("messages")+" OWNER TO CURRENT_USER")
	})
	var me string
	if err := mine.Pool.QueryRow(ctx, "SELECT current_user").Scan(&me); err != nil {
		t.Fatal(err)
	}
	prefix := likeLiteral(mine.Name[:strings.LastIndex(mine.Name, "_")+1]) + "%"
	for _, tc := range []struct {
		name  string
		trust Trust
		want  []string
	}{
		{"default: the role it connects as", Trust{}, []string{mine.Name}},
		{"default: and the owner of a listed schema", Trust{Listed: []string{theirs.Name, "no_such_schema"}}, []string{mine.Name, table.Name, theirs.Name}},
		{"named owners only", Trust{Owners: []string{other.Name}}, nil},
		{"named owners, both", Trust{Owners: []string{other.Name, me}}, []string{mine.Name, table.Name, theirs.Name}},
	} {
		found, err := Discover(ctx, mine.Pool, prefix, tc.trust)
		if err != nil {
			t.Fatal(err)
		}
		all, trusted := names(found)
		if len(all) != 3 {
			t.Fatalf("%s: found %v, want the three schemas", tc.name, all)
		}
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(trusted, want) {
			t.Errorf("%s: trusted %v, want %v", tc.name, trusted, want)
		}
		for _, f := range found {
			wantOwner, wantTable := me, me
			switch f.Schema {
			case theirs.Name:
				wantOwner = other.Name
			case table.Name:
				wantTable = other.Name
			}
			if f.Owner != wantOwner || f.TableOwner != wantTable {
				t.Errorf("%s: schema %s owned by %q, its messages table by %q; want %q and %q", tc.name, f.Schema, f.Owner, f.TableOwner, wantOwner, wantTable)
			}
			if len(tc.trust.Owners) > 0 && !slices.Equal(f.Owners, tc.trust.Owners) {
				t.Errorf("%s: trusted owners %v, want %v as named", tc.name, f.Owners, tc.trust.Owners)
			}
		}
	}
}
