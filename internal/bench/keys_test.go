package bench_test

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/bench"
)

// The keys of a backlog's rows: interleaved, row i has key i mod keys;
// grouped, each key's rows are consecutive; both give every key its share
// of the rows, one more at most.
func TestKeyOf(t *testing.T) {
	for _, tt := range []struct {
		order string
		want  []int
	}{
		{"", []int{0, 1, 2, 0, 1, 2, 0, 1}},
		{bench.KeyInterleaved, []int{0, 1, 2, 0, 1, 2, 0, 1}},
		{bench.KeyGrouped, []int{0, 0, 0, 1, 1, 1, 2, 2}},
	} {
		for row, want := range tt.want {
			if got := bench.KeyOf(row, len(tt.want), 3, tt.order); got != want {
				t.Errorf("KeyOf(%d, %d, 3, %q) = %d, want %d", row, len(tt.want), tt.order, got, want)
			}
		}
	}
	for _, order := range []string{bench.KeyInterleaved, bench.KeyGrouped} {
		for _, c := range []struct{ n, keys int }{{200000, 5000}, {1000, 7}, {5, 5}, {3, 5}} {
			count := make([]int, c.keys)
			last, runs := -1, 0
			for row := range c.n {
				k := bench.KeyOf(row, c.n, c.keys, order)
				if k < 0 || k >= c.keys {
					t.Fatalf("%s, %d rows, %d keys: row %d has key %d", order, c.n, c.keys, row, k)
				}
				count[k]++
				if k != last {
					runs++
				}
				last = k
			}
			least, most := c.n, 0
			for _, n := range count {
				least, most = min(least, n), max(most, n)
			}
			if most-least > 1 {
				t.Errorf("%s, %d rows, %d keys: from %d to %d rows a key, want shares within one row", order, c.n, c.keys, least, most)
			}
			if order == bench.KeyGrouped && runs != min(c.n, c.keys) {
				t.Errorf("grouped, %d rows, %d keys: %d runs of one key, want one a key", c.n, c.keys, runs)
			}
		}
	}
}

// Options.Validate refuses a key order other than interleaved and grouped,
// and a negative number of keys.
func TestValidate_Keys(t *testing.T) {
	o := bench.Options{Mode: "backlog", N: 10, Keys: 3}
	for order, ok := range map[string]bool{"": true, bench.KeyInterleaved: true, bench.KeyGrouped: true, "random": false} {
		o.KeyOrder = order
		if err := o.Validate(); (err == nil) != ok {
			t.Errorf("key order %q: Validate = %v", order, err)
		}
	}
	o.Keys, o.KeyOrder = -1, ""
	if o.Validate() == nil {
		t.Error("-keys -1: Validate = nil, want an error")
	}
}
