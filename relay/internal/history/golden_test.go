package history

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/golden"
)

// TestGoldenSQL compares the keeper's statements, rendered for the schema
// "outbox", with testdata/<statement>.sql: a reviewer reads and diffs the
// final SQL there. go test -run TestGoldenSQL -update rewrites the files.
func TestGoldenSQL(t *testing.T) {
	s := Render(`"outbox"`)
	files := map[string]string{"maintain": s.Maintain, "partitions": s.Partitions}
	for table, q := range s.DeleteExpiredFirst {
		files["delete_expired_first_"+table] = q
	}
	golden.SQL(t, "testdata", "./relay/internal/history", "the keeper", files)
}

func TestLookupWidth_IsHalfTheRetentionAtLeastASecond(t *testing.T) {
	for _, c := range []struct{ keep, want time.Duration }{
		{7 * 24 * time.Hour, 84 * time.Hour},
		{time.Hour, 30 * time.Minute},
		{time.Second, time.Second},
		{0, 30 * 24 * time.Hour},
	} {
		if got := LookupWidth(c.keep); got != c.want {
			t.Errorf("LookupWidth(%s) = %s, want %s", c.keep, got, c.want)
		}
	}
}

func TestWidth_IsAQuarterOfTheRetentionAtLeastASecond(t *testing.T) {
	for _, c := range []struct{ keep, want time.Duration }{
		{7 * 24 * time.Hour, 42 * time.Hour},
		{time.Hour, 15 * time.Minute},
		{2 * time.Second, time.Second},
		{0, 30 * 24 * time.Hour},
		{-1, 30 * 24 * time.Hour},
	} {
		if got := Width(c.keep); got != c.want {
			t.Errorf("Width(%s) = %s, want %s", c.keep, got, c.want)
		}
	}
}
