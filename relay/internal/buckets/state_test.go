package buckets

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// t0 is the time the tests decide from: State never reads the clock.
var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// epochOf is the epoch the tests acquire a bucket under.
func epochOf(id int32) int64 { return 100 + int64(id) }

// span returns the buckets from..to, inclusive.
func span(from, to int32) []int32 {
	var ids []int32
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

// held maps ids to their epochs (epochOf): what Add acquires and what a
// round renews.
func held(ids ...int32) map[int32]int64 {
	m := make(map[int32]int64, len(ids))
	for _, id := range ids {
		m[id] = epochOf(id)
	}
	return m
}

// stateWith returns a state that owns ids under epochOf.
func stateWith(t *testing.T, ids ...int32) *State {
	t.Helper()
	s := NewState()
	if got := s.Add(held(ids...)); !slices.Equal(got, ids) {
		t.Fatalf("Add = %v, want %v", got, ids)
	}
	return s
}

func sum(shares []int32) int {
	n := 0
	for _, v := range shares {
		n += int(v)
	}
	return n
}

// rowsOf returns n rows of bucket id, as Claimed takes them.
func rowsOf(id int32, n int) []int32 {
	return slices.Repeat([]int32{id}, n)
}

// released is one bucket of Plan.Release.
type released struct {
	Bucket    int32
	Epoch     int64
	DecidedAt time.Time
}

// releasedOf returns p's releases ordered by bucket (Plan.Release follows
// no order), checking its three slices line up.
func releasedOf(t *testing.T, p Plan) []released {
	t.Helper()
	if len(p.Epochs) != len(p.Release) || len(p.DecidedAt) != len(p.Release) {
		t.Fatalf("Plan.Release %v, Epochs %v, DecidedAt %v: lengths differ", p.Release, p.Epochs, p.DecidedAt)
	}
	r := make([]released, len(p.Release))
	for i := range p.Release {
		r[i] = released{p.Release[i], p.Epochs[i], p.DecidedAt[i]}
	}
	slices.SortFunc(r, func(a, b released) int { return int(a.Bucket - b.Bucket) })
	return r
}

// releasedAt lists ids as released under epochOf, decided at at.
func releasedAt(at time.Time, ids ...int32) []released {
	var r []released
	for _, id := range ids {
		r = append(r, released{id, epochOf(id), at})
	}
	return r
}

// drainedNow reports whether s.Drained() has a signal ready.
func drainedNow(s *State) bool {
	select {
	case <-s.Drained():
		return true
	default:
		return false
	}
}

// claimableNow returns the buckets the next claim would take, ending that
// claim at once.
func claimableNow(s *State) []int32 {
	c := s.Claimable(Count, 0)
	s.Claimed(c, nil)
	return c.Buckets
}

func TestShare(t *testing.T) {
	t.Parallel()
	t.Run("no relay alive", func(t *testing.T) {
		t.Parallel()
		// Before the first round counts itself, a relay takes them all.
		if got := Share(0, 0); got != Count {
			t.Errorf("Share(0, 0) = %d, want %d", got, Count)
		}
	})
	for _, tc := range []struct {
		n    int
		want []int // the shares of the first ranks, when checked
	}{
		{n: 1, want: []int{64}},
		{n: 2, want: []int{32, 32}},
		{n: 3, want: []int{22, 21, 21}},
		{n: 5, want: []int{13, 13, 13, 13, 12}},
		{n: 7, want: []int{10, 9, 9, 9, 9, 9, 9}},
		{n: 10},
		{n: 63},
		{n: 64},
		{n: 65},
		{n: 100},
	} {
		t.Run("n="+strconv.Itoa(tc.n), func(t *testing.T) {
			t.Parallel()
			shares := make([]int, tc.n)
			total := 0
			for rank := range tc.n {
				shares[rank] = Share(rank, tc.n)
				total += shares[rank]
			}
			if total != Count {
				t.Errorf("shares %v add up to %d, want %d", shares, total, Count)
			}
			lo, hi := slices.Min(shares), slices.Max(shares)
			if hi-lo > 1 {
				t.Errorf("shares %v differ by %d, want at most 1", shares, hi-lo)
			}
			if lo != Count/tc.n {
				t.Errorf("smallest share %d, want %d", lo, Count/tc.n)
			}
			// The first ranks get the extra: the shares never grow.
			if !slices.IsSortedFunc(shares, func(a, b int) int { return b - a }) {
				t.Errorf("shares %v: a later rank gets more than an earlier one", shares)
			}
			if extra := Count % tc.n; extra > 0 && (shares[extra-1] != lo+1 || shares[extra] != lo) {
				t.Errorf("shares %v: want the first %d ranks to get one more", shares, extra)
			}
			if tc.want != nil && !slices.Equal(shares[:len(tc.want)], tc.want) {
				t.Errorf("shares %v, want %v first", shares, tc.want)
			}
		})
	}
	t.Run("more relays than buckets", func(t *testing.T) {
		t.Parallel()
		if got := Share(63, 65); got != 1 {
			t.Errorf("Share(63, 65) = %d, want 1", got)
		}
		if got := Share(64, 65); got != 0 {
			t.Errorf("Share(64, 65) = %d, want 0", got)
		}
		if got := Share(63, 64); got != 1 {
			t.Errorf("Share(63, 64) = %d, want 1", got)
		}
	})
}

func TestTimesFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rowLease time.Duration
		renew    time.Duration
	}{
		{30 * time.Second, time.Second},                  // rowLease/10 = 3s: capped at 1s
		{10 * time.Second, time.Second},                  // exactly the cap
		{5 * time.Second, 500 * time.Millisecond},        // rowLease/10
		{2 * time.Second, 200 * time.Millisecond},        // rowLease/10
		{time.Second, 100 * time.Millisecond},            // exactly the floor
		{500 * time.Millisecond, 100 * time.Millisecond}, // rowLease/10 = 50ms: floored at 100ms
		{5 * time.Minute, time.Second},
	} {
		t.Run(tc.rowLease.String(), func(t *testing.T) {
			t.Parallel()
			got := TimesFor(tc.rowLease)
			within := tc.rowLease + 3*tc.renew
			want := Times{Renew: tc.renew, RenewWithin: within, Lease: within + 10*tc.renew, Alive: within + 10*tc.renew, Forming: 10 * tc.renew}
			if got != want {
				t.Errorf("TimesFor(%v) = %+v, want %+v", tc.rowLease, got, want)
			}
		})
	}
	t.Run("30s", func(t *testing.T) {
		t.Parallel()
		got := TimesFor(30 * time.Second)
		if got.Renew != time.Second || got.RenewWithin != 33*time.Second || got.Lease != 43*time.Second || got.Alive != 43*time.Second {
			t.Errorf("TimesFor(30s) = %+v, want Renew 1s, RenewWithin 33s, Lease 43s, Alive 43s", got)
		}
	})
}

func TestClaimableShares(t *testing.T) {
	t.Parallel()
	t.Run("no bucket", func(t *testing.T) {
		t.Parallel()
		c := NewState().Claimable(100, 0)
		if len(c.Buckets) != 0 || len(c.Epochs) != 0 || len(c.Shares) != 0 {
			t.Errorf("Claimable of an empty state = %+v, want nothing", c)
		}
	})
	for _, tc := range []struct {
		name  string
		ids   []int32
		limit int
	}{
		{"4 buckets, 100 rows", span(0, 3), 100},
		{"7 buckets, 100 rows", []int32{3, 9, 17, 20, 41, 50, 63}, 100},
		{"7 buckets, 7 rows", span(10, 16), 7},
		{"64 buckets, 1000 rows", span(0, Count-1), 1000},
		{"64 buckets, 64 rows", span(0, Count-1), 64},
		{"1 bucket, 5 rows", []int32{42}, 5},
		{"7 buckets, 3 rows", span(10, 16), 3},
		{"64 buckets, 1 row", span(0, Count-1), 1},
		{"64 buckets, 10 rows", span(0, Count-1), 10},
		{"5 buckets, 0 rows", span(0, 4), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewState()
			// Add in an order other than the buckets'.
			acquired := held(tc.ids...)
			if got := s.Add(acquired); !slices.Equal(got, tc.ids) {
				t.Fatalf("Add = %v, want %v", got, tc.ids)
			}
			nonZero := map[int32]bool{}
			// Enough claims for the rounding to visit every bucket.
			for round := range len(tc.ids) + 1 {
				c := s.Claimable(tc.limit, 0)
				if !slices.Equal(c.Buckets, tc.ids) {
					t.Fatalf("claim %d: Buckets = %v, want %v", round, c.Buckets, tc.ids)
				}
				if len(c.Epochs) != len(tc.ids) || len(c.Shares) != len(tc.ids) {
					t.Fatalf("claim %d: %d buckets, %d epochs, %d shares", round, len(c.Buckets), len(c.Epochs), len(c.Shares))
				}
				for i, id := range c.Buckets {
					if c.Epochs[i] != epochOf(id) {
						t.Errorf("claim %d: epoch of bucket %d = %d, want %d", round, id, c.Epochs[i], epochOf(id))
					}
					if c.Shares[i] < 0 {
						t.Errorf("claim %d: share of bucket %d = %d < 0", round, id, c.Shares[i])
					}
					if c.Shares[i] > 0 {
						nonZero[id] = true
					}
				}
				total := sum(c.Shares)
				if tc.limit >= len(tc.ids) && total != tc.limit {
					t.Errorf("claim %d: shares %v add up to %d, want %d", round, c.Shares, total, tc.limit)
				}
				if total > tc.limit {
					t.Errorf("claim %d: shares %v add up to %d, more than %d", round, c.Shares, total, tc.limit)
				}
				// Equal weights: as even as can be.
				if lo, hi := slices.Min(c.Shares), slices.Max(c.Shares); hi-lo > 1 {
					t.Errorf("claim %d: shares %v differ by %d, want at most 1", round, c.Shares, hi-lo)
				}
				// No rows: every weight stays at its base.
				s.Claimed(c, nil)
			}
			if tc.limit > 0 {
				for _, id := range tc.ids {
					if !nonZero[id] {
						t.Errorf("bucket %d never got a share in %d claims of %d rows: the rounding does not rotate", id, len(tc.ids)+1, tc.limit)
					}
				}
			}
		})
	}
	t.Run("rounding rotates", func(t *testing.T) {
		t.Parallel()
		// One row over 64 buckets: each claim gives it to one bucket,
		// and 64 claims in a row give it to each of them once.
		s := stateWith(t, span(0, Count-1)...)
		seen := map[int32]int{}
		for range Count {
			c := s.Claimable(1, 0)
			if sum(c.Shares) != 1 {
				t.Fatalf("shares %v add up to %d, want 1", c.Shares, sum(c.Shares))
			}
			for i, v := range c.Shares {
				if v > 0 {
					seen[c.Buckets[i]]++
				}
			}
			s.Claimed(c, nil)
		}
		for id := range int32(Count) {
			if seen[id] != 1 {
				t.Errorf("bucket %d got the row %d times in %d claims, want once", id, seen[id], Count)
			}
		}
	})
}

func TestClaimableRotationWithMost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ids  []int32
		most int
	}{
		{"10 buckets, 3 at most", span(0, 9), 3},
		{"10 buckets, 1 at most", span(0, 9), 1},
		{"10 buckets, 9 at most", span(0, 9), 9},
		{"64 buckets, 5 at most", span(0, Count-1), 5},
		{"sparse buckets, 2 at most", []int32{2, 7, 11, 30, 31, 60, 63}, 2},
		{"10 buckets, 4 at most", span(20, 29), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stateWith(t, tc.ids...)
			seen := map[int32]bool{}
			// The buckets of successive claims follow one another round
			// the owned ones: ceil(owned/most) claims reach all of them.
			claims := (len(tc.ids) + tc.most - 1) / tc.most
			for round := range claims {
				c := s.Claimable(100, tc.most)
				if len(c.Buckets) != tc.most {
					t.Fatalf("claim %d: Buckets = %v, want %d of them", round, c.Buckets, tc.most)
				}
				if !slices.IsSorted(c.Buckets) {
					t.Errorf("claim %d: Buckets = %v, not sorted", round, c.Buckets)
				}
				if len(slices.Compact(slices.Clone(c.Buckets))) != len(c.Buckets) {
					t.Errorf("claim %d: Buckets = %v, repeated", round, c.Buckets)
				}
				for i, id := range c.Buckets {
					if !slices.Contains(tc.ids, id) {
						t.Errorf("claim %d: bucket %d is not owned", round, id)
					}
					if c.Epochs[i] != epochOf(id) || c.Epoch(id) != epochOf(id) {
						t.Errorf("claim %d: epoch of bucket %d = %d, want %d", round, id, c.Epochs[i], epochOf(id))
					}
					seen[id] = true
				}
				if sum(c.Shares) != 100 {
					t.Errorf("claim %d: shares %v add up to %d, want 100", round, c.Shares, sum(c.Shares))
				}
				s.Claimed(c, nil)
			}
			for _, id := range tc.ids {
				if !seen[id] {
					t.Errorf("bucket %d in no claim of %d (most %d): no rotation", id, claims, tc.most)
				}
			}
		})
	}
	for _, most := range []int{0, 10, 11, 64} {
		t.Run("10 buckets, "+strconv.Itoa(most)+" at most: all", func(t *testing.T) {
			t.Parallel()
			ids := span(0, 9)
			s := stateWith(t, ids...)
			for round := range 3 {
				c := s.Claimable(20, most)
				if !slices.Equal(c.Buckets, ids) {
					t.Errorf("claim %d: Buckets = %v, want %v", round, c.Buckets, ids)
				}
				s.Claimed(c, nil)
			}
		})
	}
}

func TestClaimedWeights(t *testing.T) {
	t.Parallel()
	const limit = 300
	// claim starts a claim of limit rows, checking its shares add up.
	claim := func(t *testing.T, s *State) Claim {
		t.Helper()
		c := s.Claimable(limit, 0)
		if sum(c.Shares) != limit {
			t.Fatalf("shares %v add up to %d, want %d", c.Shares, sum(c.Shares), limit)
		}
		return c
	}
	share := func(c Claim, id int32) int {
		i, ok := slices.BinarySearch(c.Buckets, id)
		if !ok {
			return -1
		}
		return int(c.Shares[i])
	}

	t.Run("filled doubles, not filled falls back", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, 0, 1)
		steps := []struct {
			rows0, rows1 func(share int) int // rows of bucket 0 and 1 for their shares
			want0, want1 int                 // shares of the next claim
		}{
			// Both at weight 1: 150/150. Bucket 0 fills it, 1 does not:
			// weights 2 and 1, 200/100.
			{rows0: same, rows1: less, want0: 200, want1: 100},
			// 0 fills again: weights 4 and 1, 240/60.
			{rows0: same, rows1: none, want0: 240, want1: 60},
			// More rows than the share count as filling it: 8 and 1.
			{rows0: more, rows1: less, want0: 266, want1: 33},
			// 0 falls short: back to 1, and 1 fills: 2. 100/200.
			{rows0: less, rows1: same, want0: 100, want1: 200},
			// Neither fills: both at 1.
			{rows0: none, rows1: less, want0: 150, want1: 150},
			// Both fill: both at 2, still even.
			{rows0: same, rows1: same, want0: 150, want1: 150},
		}
		c := claim(t, s)
		if share(c, 0) != 150 || share(c, 1) != 150 {
			t.Fatalf("first shares %v, want [150 150]", c.Shares)
		}
		for i, step := range steps {
			var rows []int32
			rows = append(rows, rowsOf(0, step.rows0(share(c, 0)))...)
			rows = append(rows, rowsOf(1, step.rows1(share(c, 1)))...)
			s.Claimed(c, rows)
			c = claim(t, s)
			// 266+33 = 299: the row the rounding leaves goes to either.
			got0, got1 := share(c, 0), share(c, 1)
			if !(got0 == step.want0 && got1 == step.want1) &&
				!(step.want0+step.want1 < limit && got0+got1 == limit && got0 >= step.want0 && got1 >= step.want1) {
				t.Fatalf("step %d: shares %v, want [%d %d]", i, c.Shares, step.want0, step.want1)
			}
		}
		s.Claimed(c, nil)
	})

	t.Run("capped at maxWeight", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, 0, 1)
		// 4100 rows: at weights 1024 and 1, exactly 4096 and 4; at 2048
		// and 1 they would be 4097 or 4098 and 2 or 3.
		const big = 4100
		for range 20 {
			c := s.Claimable(big, 0)
			s.Claimed(c, rowsOf(0, share(c, 0)))
		}
		if w := s.owned[0].weight; w != maxWeight {
			t.Errorf("weight after 20 filled claims = %d, want %d", w, maxWeight)
		}
		c := s.Claimable(big, 0)
		if !slices.Equal(c.Shares, []int32{4096, 4}) {
			t.Errorf("shares at the cap %v, want [4096 4]", c.Shares)
		}
		// One claim short of its share: the base share again.
		s.Claimed(c, rowsOf(0, share(c, 0)-1))
		c = s.Claimable(big, 0)
		if !slices.Equal(c.Shares, []int32{2050, 2050}) {
			t.Errorf("shares after falling short %v, want [2050 2050]", c.Shares)
		}
		s.Claimed(c, nil)
	})

	t.Run("a zero share keeps its weight", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, 0, 1)
		for range 2 { // bucket 0 to weight 4
			c := claim(t, s)
			s.Claimed(c, rowsOf(0, share(c, 0)))
		}
		// One row between weights 4 and 1: one bucket gets it, the other 0.
		c := s.Claimable(1, 0)
		if sum(c.Shares) != 1 {
			t.Fatalf("shares %v, want one row", c.Shares)
		}
		zeroShare0 := share(c, 0) == 0
		s.Claimed(c, nil)
		c = claim(t, s)
		if zeroShare0 {
			// Bucket 0 had no share to fill: it keeps weight 4; 1 fell short.
			if share(c, 0) != 240 || share(c, 1) != 60 {
				t.Errorf("shares %v, want [240 60]", c.Shares)
			}
		} else {
			// Bucket 0 fell short of its one row: back to 1.
			if share(c, 0) != 150 || share(c, 1) != 150 {
				t.Errorf("shares %v, want [150 150]", c.Shares)
			}
		}
		s.Claimed(c, nil)
	})

	t.Run("rows of other buckets do not fill a share", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, 0, 1)
		c := claim(t, s)
		// 300 rows, all of bucket 1 (and some of a bucket not owned).
		s.Claimed(c, append(rowsOf(1, 300), rowsOf(9, 10)...))
		c = claim(t, s)
		if share(c, 0) != 100 || share(c, 1) != 200 {
			t.Errorf("shares %v, want [100 200]", c.Shares)
		}
		s.Claimed(c, nil)
	})
}

// Rows to give a bucket for its share: none, fewer, as many, more.
func none(int) int       { return 0 }
func less(share int) int { return share - 1 }
func same(share int) int { return share }
func more(share int) int { return share + 5 }

func TestReconcile(t *testing.T) {
	t.Parallel()
	const rowLease = 30 * time.Second
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		owned   []int32
		renewed map[int32]int64
		target  int

		lost          []int32
		release       []released
		want          int
		ownedAfter    int
		claimable     []int32
		releasingNext bool
	}{
		{
			name:  "steady",
			owned: span(0, 3), renewed: held(span(0, 3)...), target: 4,
			ownedAfter: 4, claimable: span(0, 3),
		},
		{
			name:  "nothing at all",
			owned: nil, renewed: map[int32]int64{}, target: 0,
		},
		{
			name:  "first round takes its share",
			owned: nil, renewed: map[int32]int64{}, target: Count,
			want: Count,
		},
		{
			name:  "short of its share",
			owned: span(0, 1), renewed: held(0, 1), target: 5,
			want: 3, ownedAfter: 2, claimable: span(0, 1),
		},
		{
			name:  "lost: not renewed",
			owned: span(0, 3), renewed: held(0, 1, 3), target: 3,
			lost: []int32{2}, ownedAfter: 3, claimable: []int32{0, 1, 3},
		},
		{
			name:  "lost: not renewed, and short",
			owned: span(0, 3), renewed: held(0, 1), target: 4,
			lost: []int32{2, 3}, want: 2, ownedAfter: 2, claimable: span(0, 1),
		},
		{
			name:  "lost: none renewed",
			owned: span(0, 3), renewed: nil, target: 0,
			lost: span(0, 3),
		},
		{
			// Held under an epoch the state does not know: the one it
			// knew is lost, and the other is left over from an earlier
			// process with the same id, released at once.
			name:  "lost: renewed under another epoch",
			owned: span(0, 3), renewed: map[int32]int64{0: epochOf(0), 1: epochOf(1) + 7, 2: epochOf(2), 3: epochOf(3)}, target: 4,
			lost:    []int32{1},
			release: []released{{1, epochOf(1) + 7, now}},
			want:    1, ownedAfter: 3, claimable: []int32{0, 2, 3},
		},
		{
			name:  "unknown bucket released at once",
			owned: span(0, 1), renewed: held(0, 1, 9, 40), target: 2,
			release: releasedAt(now, 9, 40), ownedAfter: 2, claimable: span(0, 1),
		},
		{
			name:  "unknown buckets do not count towards the share",
			owned: nil, renewed: held(5), target: 3,
			release: releasedAt(now, 5), want: 3,
		},
		{
			name:  "beyond its share: the highest go",
			owned: span(0, 5), renewed: held(span(0, 5)...), target: 4,
			release: releasedAt(now, 4, 5), ownedAfter: 6, claimable: span(0, 3), releasingNext: true,
		},
		{
			name:  "beyond its share, sparse",
			owned: []int32{1, 8, 20, 33, 63}, renewed: held(1, 8, 20, 33, 63), target: 2,
			release: releasedAt(now, 20, 33, 63), ownedAfter: 5, claimable: []int32{1, 8}, releasingNext: true,
		},
		{
			name:  "share 0: all go",
			owned: span(10, 12), renewed: held(span(10, 12)...), target: 0,
			release: releasedAt(now, span(10, 12)...), ownedAfter: 3, releasingNext: true,
		},
		{
			name:  "lost and beyond its share",
			owned: span(0, 5), renewed: held(0, 1, 2, 3, 4), target: 3,
			lost: []int32{5}, release: releasedAt(now, 3, 4), ownedAfter: 5, claimable: span(0, 2), releasingNext: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stateWith(t, tc.owned...)
			p := s.Reconcile(tc.renewed, tc.target, rowLease, now)
			if !slices.Equal(p.Lost, tc.lost) {
				t.Errorf("Lost = %v, want %v", p.Lost, tc.lost)
			}
			if got := releasedOf(t, p); !slices.Equal(got, tc.release) {
				t.Errorf("Release = %+v, want %+v", got, tc.release)
			}
			if p.Want != tc.want {
				t.Errorf("Want = %d, want %d", p.Want, tc.want)
			}
			if got := s.Owned(); got != tc.ownedAfter {
				t.Errorf("Owned() = %d, want %d", got, tc.ownedAfter)
			}
			if got := s.Releasing(); got != tc.releasingNext {
				t.Errorf("Releasing() = %v, want %v", got, tc.releasingNext)
			}
			if got := claimableNow(s); !slices.Equal(got, tc.claimable) {
				t.Errorf("next claim takes %v, want %v", got, tc.claimable)
			}
			// Owner drops what it released; a second round at the same
			// share then has nothing to do.
			s.Drop(p.Release, p.Epochs)
			if s.Releasing() {
				t.Errorf("Releasing() after Drop of the release = true")
			}
			renewed := map[int32]int64{}
			ids, epochs := s.All()
			for i, id := range ids {
				renewed[id] = epochs[i]
			}
			p = s.Reconcile(renewed, max(tc.target, len(ids)), rowLease, now.Add(time.Second))
			if len(p.Lost) != 0 || len(p.Release) != 0 || p.Want != max(tc.target-len(ids), 0) {
				t.Errorf("second round: %+v, want nothing to do", p)
			}
		})
	}
}

func TestReconcileWaitsForRowsInFlight(t *testing.T) {
	t.Parallel()
	const rowLease = 30 * time.Second
	// setup returns a state owning 0..3 with two rows of bucket 3 and one
	// of bucket 2 in flight, that decided at t0 to give up 2 and 3.
	setup := func(t *testing.T) (*State, Claim) {
		t.Helper()
		s := stateWith(t, span(0, 3)...)
		c := s.Claimable(100, 0)
		s.Claimed(c, []int32{3, 2, 3, 0})
		if drainedNow(s) {
			t.Fatal("Drained() ready before anything is given up")
		}
		p := s.Reconcile(held(span(0, 3)...), 2, rowLease, t0)
		if len(p.Release) != 0 || len(p.Lost) != 0 || p.Want != 0 {
			t.Fatalf("Reconcile = %+v, want nothing released while rows are in flight", p)
		}
		if !s.Releasing() {
			t.Fatal("Releasing() = false, want 2 and 3 being given up")
		}
		if got := claimableNow(s); !slices.Equal(got, span(0, 1)) {
			t.Fatalf("next claim takes %v, want [0 1]", got)
		}
		return s, c
	}

	t.Run("released once settled", func(t *testing.T) {
		t.Parallel()
		s, c := setup(t)
		s.Settled([]Fence{{3, c.Epoch(3)}})
		if drainedNow(s) {
			t.Fatal("Drained() ready with rows of 2 and 3 still in flight")
		}
		p := s.Reconcile(held(span(0, 3)...), 2, rowLease, t0.Add(time.Second))
		if len(p.Release) != 0 {
			t.Fatalf("Release = %v with rows still in flight", p.Release)
		}
		// Settling bucket 0's row has nothing to do with the handover.
		s.Settled([]Fence{{0, c.Epoch(0)}, {2, c.Epoch(2)}})
		if !drainedNow(s) {
			t.Fatal("Drained() not ready once bucket 2 has drained")
		}
		p = s.Reconcile(held(span(0, 3)...), 2, rowLease, t0.Add(2*time.Second))
		if got, want := releasedOf(t, p), releasedAt(t0, 2); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v (decided at the first round)", got, want)
		}
		s.Drop(p.Release, p.Epochs)
		s.Settled([]Fence{{3, c.Epoch(3)}})
		if !drainedNow(s) {
			t.Fatal("Drained() not ready once bucket 3 has drained")
		}
		p = s.Reconcile(held(0, 1, 3), 2, rowLease, t0.Add(3*time.Second))
		if got, want := releasedOf(t, p), releasedAt(t0, 3); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
		s.Drop(p.Release, p.Epochs)
		if s.Owned() != 2 || s.Releasing() {
			t.Errorf("Owned() = %d, Releasing() = %v after the handover, want 2, false", s.Owned(), s.Releasing())
		}
	})

	t.Run("released once the row lease is over", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		p := s.Reconcile(held(span(0, 3)...), 2, rowLease, t0.Add(rowLease))
		if len(p.Release) != 0 {
			t.Fatalf("Release = %v at exactly the row lease, want none", p.Release)
		}
		p = s.Reconcile(held(span(0, 3)...), 2, rowLease, t0.Add(rowLease+time.Nanosecond))
		if got, want := releasedOf(t, p), releasedAt(t0, 2, 3); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
	})

	t.Run("kept again when the share grows", func(t *testing.T) {
		t.Parallel()
		s, c := setup(t)
		p := s.Reconcile(held(span(0, 3)...), 3, rowLease, t0.Add(time.Second))
		if len(p.Release) != 0 || p.Want != 0 {
			t.Fatalf("Reconcile = %+v, want bucket 2 kept again and nothing wanted", p)
		}
		if got := claimableNow(s); !slices.Equal(got, span(0, 2)) {
			t.Fatalf("next claim takes %v, want [0 1 2]", got)
		}
		// Bucket 2 is kept: settling its row is no handover.
		s.Settled([]Fence{{2, c.Epoch(2)}})
		if drainedNow(s) {
			t.Error("Drained() ready for a bucket kept")
		}
		// Bucket 3 is still given up, from t0.
		s.Settled([]Fence{{3, c.Epoch(3)}, {3, c.Epoch(3)}})
		if !drainedNow(s) {
			t.Error("Drained() not ready once bucket 3 has drained")
		}
		p = s.Reconcile(held(span(0, 3)...), 3, rowLease, t0.Add(2*time.Second))
		if got, want := releasedOf(t, p), releasedAt(t0, 3); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
	})
}

func TestReconcileWaitsForClaimUnderWay(t *testing.T) {
	t.Parallel()
	const rowLease = 30 * time.Second

	t.Run("claim ends with no rows", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, span(0, 3)...)
		c := s.Claimable(100, 0) // under way on 0..3
		p := s.Reconcile(held(span(0, 3)...), 2, rowLease, t0)
		if len(p.Release) != 0 {
			t.Fatalf("Release = %v while a claim is under way", p.Release)
		}
		// Not even once the row lease is over: the claim may still lease.
		p = s.Reconcile(held(span(0, 3)...), 2, rowLease, t0.Add(2*rowLease))
		if len(p.Release) != 0 {
			t.Fatalf("Release = %v while a claim is under way, past the row lease", p.Release)
		}
		if got := claimableNow(s); !slices.Equal(got, span(0, 1)) {
			t.Fatalf("next claim takes %v, want [0 1]", got)
		}
		if drainedNow(s) {
			t.Fatal("Drained() ready while a claim is under way")
		}
		s.Claimed(c, nil)
		if !drainedNow(s) {
			t.Fatal("Drained() not ready once the claim ended")
		}
		p = s.Reconcile(held(span(0, 3)...), 2, rowLease, t0.Add(2*rowLease+time.Second))
		if got, want := releasedOf(t, p), releasedAt(t0, 2, 3); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
	})

	t.Run("claim ends with rows", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, span(0, 3)...)
		c := s.Claimable(100, 0)
		s.Reconcile(held(span(0, 3)...), 3, rowLease, t0)
		// The claim leased a row of the bucket being given up.
		s.Claimed(c, []int32{3, 1})
		if drainedNow(s) {
			t.Fatal("Drained() ready with a row of bucket 3 in flight")
		}
		p := s.Reconcile(held(span(0, 3)...), 3, rowLease, t0.Add(time.Second))
		if len(p.Release) != 0 {
			t.Fatalf("Release = %v with a row in flight", p.Release)
		}
		s.Settled([]Fence{{3, c.Epoch(3)}})
		if !drainedNow(s) {
			t.Fatal("Drained() not ready once bucket 3 has drained")
		}
		p = s.Reconcile(held(span(0, 3)...), 3, rowLease, t0.Add(2*time.Second))
		if got, want := releasedOf(t, p), releasedAt(t0, 3); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
	})

	t.Run("two claims under way", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, 0, 1)
		c1 := s.Claimable(10, 0)
		c2 := s.Claimable(10, 0)
		s.Reconcile(held(0, 1), 1, rowLease, t0)
		s.Claimed(c1, nil)
		p := s.Reconcile(held(0, 1), 1, rowLease, t0.Add(time.Second))
		if len(p.Release) != 0 {
			t.Fatalf("Release = %v with a claim still under way", p.Release)
		}
		s.Claimed(c2, nil)
		p = s.Reconcile(held(0, 1), 1, rowLease, t0.Add(2*time.Second))
		if got, want := releasedOf(t, p), releasedAt(t0, 1); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
	})

	t.Run("claim on other buckets does not hold it", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, span(0, 3)...)
		// Under way on 0 and 1 only.
		c := s.Claimable(100, 2)
		if !slices.Equal(c.Buckets, []int32{2, 3}) && !slices.Equal(c.Buckets, []int32{0, 1}) {
			t.Fatalf("claim of 2 at most takes %v", c.Buckets)
		}
		free := slices.DeleteFunc(span(0, 3), func(id int32) bool { return slices.Contains(c.Buckets, id) })
		// Give up everything: those not under claim go now.
		p := s.Reconcile(held(span(0, 3)...), 0, rowLease, t0)
		if got, want := releasedOf(t, p), releasedAt(t0, free...); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
		s.Drop(p.Release, p.Epochs)
		s.Claimed(c, nil)
		p = s.Reconcile(held(c.Buckets...), 0, rowLease, t0.Add(time.Second))
		if got, want := releasedOf(t, p), releasedAt(t0, c.Buckets...); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
	})
}

func TestReconcileShortKeepsGivingUpFirst(t *testing.T) {
	t.Parallel()
	const rowLease = 30 * time.Second
	s := stateWith(t, span(0, 5)...)
	c := s.Claimable(60, 0)
	// A row of each of 3, 4 and 5 in flight: they cannot go at once.
	s.Claimed(c, []int32{3, 4, 5})
	p := s.Reconcile(held(span(0, 5)...), 3, rowLease, t0)
	if len(p.Release) != 0 || p.Want != 0 {
		t.Fatalf("Reconcile = %+v, want 3, 4, 5 given up but held", p)
	}
	if got := claimableNow(s); !slices.Equal(got, span(0, 2)) {
		t.Fatalf("next claim takes %v, want [0 1 2]", got)
	}
	for _, tc := range []struct {
		target    int
		want      int
		claimable []int32
		releasing bool
	}{
		// Two more: 3 and 4 are kept again, the lowest first; 5 still goes.
		{target: 5, want: 0, claimable: span(0, 4), releasing: true},
		// Eight: 5 is kept too, and two free ones wanted.
		{target: 8, want: 2, claimable: span(0, 5), releasing: false},
	} {
		p := s.Reconcile(held(span(0, 5)...), tc.target, rowLease, t0.Add(time.Second))
		if len(p.Lost) != 0 || len(p.Release) != 0 || p.Want != tc.want {
			t.Errorf("target %d: Reconcile = %+v, want nothing released and Want %d", tc.target, p, tc.want)
		}
		if got := claimableNow(s); !slices.Equal(got, tc.claimable) {
			t.Errorf("target %d: next claim takes %v, want %v", tc.target, got, tc.claimable)
		}
		if got := s.Releasing(); got != tc.releasing {
			t.Errorf("target %d: Releasing() = %v, want %v", tc.target, got, tc.releasing)
		}
	}
	// Settled rows of kept buckets signal nothing.
	s.Settled([]Fence{{3, c.Epoch(3)}, {4, c.Epoch(4)}, {5, c.Epoch(5)}})
	if drainedNow(s) {
		t.Error("Drained() ready with nothing given up")
	}
	// Given up again later, decided anew.
	at := t0.Add(time.Hour)
	p = s.Reconcile(held(span(0, 5)...), 4, rowLease, at)
	if got, want := releasedOf(t, p), releasedAt(at, 4, 5); !slices.Equal(got, want) {
		t.Errorf("Release = %+v, want %+v", got, want)
	}
}

func TestClaimEpochAndSettledFence(t *testing.T) {
	t.Parallel()
	const rowLease = 30 * time.Second

	t.Run("Epoch", func(t *testing.T) {
		t.Parallel()
		s := NewState()
		s.Add(map[int32]int64{1: 5, 2: 6, 40: 77})
		c := s.Claimable(10, 0)
		for _, tc := range []struct {
			bucket int32
			epoch  int64
		}{{1, 5}, {2, 6}, {40, 77}, {0, 0}, {3, 0}, {63, 0}, {-1, 0}} {
			if got := c.Epoch(tc.bucket); got != tc.epoch {
				t.Errorf("Epoch(%d) = %d, want %d", tc.bucket, got, tc.epoch)
			}
		}
		if got := (Claim{}).Epoch(1); got != 0 {
			t.Errorf("empty claim: Epoch(1) = %d, want 0", got)
		}
		// The claim keeps its epochs when the bucket changes hands.
		s.Drop([]int32{2}, []int64{6})
		s.Add(map[int32]int64{2: 9})
		if got := c.Epoch(2); got != 6 {
			t.Errorf("Epoch(2) after the bucket changed epoch = %d, want 6", got)
		}
		s.Claimed(c, nil)
	})

	t.Run("stale settle does not touch the new epoch", func(t *testing.T) {
		t.Parallel()
		s := NewState()
		s.Add(map[int32]int64{2: 6})
		old := s.Claimable(10, 0)
		s.Claimed(old, []int32{2, 2})
		// Released (or lost) and acquired again under a new epoch.
		s.Drop([]int32{2}, []int64{6})
		if s.Owned() != 0 {
			t.Fatalf("Owned() after Drop = %d, want 0", s.Owned())
		}
		s.Add(map[int32]int64{2: 9})
		c := s.Claimable(10, 0)
		if got := c.Epoch(2); got != 9 {
			t.Fatalf("Epoch(2) = %d, want 9", got)
		}
		s.Claimed(c, []int32{2})
		// The old claim's rows settle under their epoch: not this bucket's.
		s.Settled([]Fence{{2, 6}, {2, 6}})
		if got := s.owned[2].inFlight; got != 1 {
			t.Errorf("in flight after stale settles = %d, want 1", got)
		}
		// Through the API: given up, it waits for its row.
		p := s.Reconcile(map[int32]int64{2: 9}, 0, rowLease, t0)
		if len(p.Release) != 0 {
			t.Fatalf("Release = %v with a row of epoch 9 in flight", p.Release)
		}
		if drainedNow(s) {
			t.Fatal("Drained() ready with a row of epoch 9 in flight")
		}
		s.Settled([]Fence{{2, 9}})
		if !drainedNow(s) {
			t.Fatal("Drained() not ready once the row of epoch 9 settled")
		}
		p = s.Reconcile(map[int32]int64{2: 9}, 0, rowLease, t0.Add(time.Second))
		if got, want := releasedOf(t, p), []released{{2, 9, t0}}; !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
	})

	t.Run("stale claim's rows are not in flight", func(t *testing.T) {
		t.Parallel()
		s := NewState()
		s.Add(map[int32]int64{2: 6})
		old := s.Claimable(10, 0)
		p := s.Reconcile(map[int32]int64{}, 1, rowLease, t0)
		if !slices.Equal(p.Lost, []int32{2}) {
			t.Fatalf("Lost = %v, want [2]", p.Lost)
		}
		s.Add(map[int32]int64{2: 9})
		// The old claim ends with rows leased under epoch 6.
		s.Claimed(old, []int32{2, 2, 2})
		if got := s.owned[2].inFlight; got != 0 {
			t.Errorf("in flight of epoch 9 after a claim under epoch 6 = %d, want 0", got)
		}
	})

	t.Run("settle of a bucket not owned", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, 1)
		s.Settled([]Fence{{5, epochOf(5)}, {1, epochOf(1) + 1}})
		if got := s.owned[1].inFlight; got != 0 {
			t.Errorf("in flight = %d, want 0", got)
		}
		if s.Owned() != 1 {
			t.Errorf("Owned() = %d, want 1", s.Owned())
		}
	})
}

// TestClaimedStaleClaimUnderWay checks that the end of a claim made under a
// bucket's old epoch does not take away the claim under way of its new
// epoch: a bucket lost (its lease ran out while a claim was under way) and
// acquired again under a new epoch while that claim goes on must not have
// its claims under way counted down by the old claim's Claimed, or
// Reconcile would release the bucket while the new claim may still lease
// its rows.
func TestClaimedStaleClaimUnderWay(t *testing.T) {
	t.Parallel()
	const rowLease = 30 * time.Second
	s := NewState()
	s.Add(map[int32]int64{2: 6})
	old := s.Claimable(10, 0) // under way under epoch 6
	// The relay stalls; the lease runs out; the round loses bucket 2 and
	// acquires it again under epoch 9.
	if p := s.Reconcile(map[int32]int64{}, 1, rowLease, t0); !slices.Equal(p.Lost, []int32{2}) || p.Want != 1 {
		t.Fatalf("Reconcile = %+v, want 2 lost and 1 wanted", p)
	}
	s.Add(map[int32]int64{2: 9})
	cur := s.Claimable(10, 0) // under way under epoch 9
	s.Claimed(old, nil)       // the old claim ends
	// Bucket 2 is given up while cur is under way: it must wait for cur.
	p := s.Reconcile(map[int32]int64{2: 9}, 0, rowLease, t0.Add(time.Second))
	if len(p.Release) != 0 {
		t.Errorf("Release = %v while a claim under epoch 9 is under way (claiming = %d)", p.Release, s.owned[2].claiming)
	}
	s.Claimed(cur, nil)
}

func TestDropAddAll(t *testing.T) {
	t.Parallel()

	t.Run("Add returns ids in order", func(t *testing.T) {
		t.Parallel()
		s := NewState()
		acquired := map[int32]int64{63: 1, 0: 2, 17: 3, 5: 4, 40: 5}
		if got, want := s.Add(acquired), []int32{0, 5, 17, 40, 63}; !slices.Equal(got, want) {
			t.Errorf("Add = %v, want %v", got, want)
		}
		if got := s.Add(map[int32]int64{}); len(got) != 0 {
			t.Errorf("Add of nothing = %v", got)
		}
		if s.Owned() != 5 {
			t.Errorf("Owned() = %d, want 5", s.Owned())
		}
		assertAll(t, s, acquired)
	})

	t.Run("Drop matches epochs", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, span(0, 5)...)
		s.Drop([]int32{0, 1, 2, 9}, []int64{epochOf(0), epochOf(1) + 1, epochOf(2), epochOf(9)})
		want := held(1, 3, 4, 5)
		assertAll(t, s, want)
		if s.Owned() != 4 {
			t.Errorf("Owned() = %d, want 4", s.Owned())
		}
		s.Drop(nil, nil)
		assertAll(t, s, want)
		s.Drop([]int32{1}, []int64{epochOf(1)})
		assertAll(t, s, held(3, 4, 5))
	})

	t.Run("Add under a new epoch", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, 1, 2)
		s.Add(map[int32]int64{2: 50})
		assertAll(t, s, map[int32]int64{1: epochOf(1), 2: 50})
		s.Drop([]int32{2}, []int64{epochOf(2)}) // the old epoch: kept
		assertAll(t, s, map[int32]int64{1: epochOf(1), 2: 50})
		s.Drop([]int32{2}, []int64{50})
		assertAll(t, s, held(1))
	})

	t.Run("All of nothing", func(t *testing.T) {
		t.Parallel()
		ids, epochs := NewState().All()
		if len(ids) != 0 || len(epochs) != 0 {
			t.Errorf("All() = %v, %v, want nothing", ids, epochs)
		}
	})

	t.Run("All includes buckets being given up", func(t *testing.T) {
		t.Parallel()
		s := stateWith(t, span(0, 3)...)
		c := s.Claimable(10, 0)
		s.Reconcile(held(span(0, 3)...), 1, time.Second, t0)
		assertAll(t, s, held(span(0, 3)...))
		s.Claimed(c, nil)
	})

	t.Run("Releasing", func(t *testing.T) {
		t.Parallel()
		s := NewState()
		if s.Releasing() {
			t.Fatal("Releasing() of an empty state = true")
		}
		s.Add(held(span(0, 3)...))
		if s.Releasing() {
			t.Fatal("Releasing() with nothing given up = true")
		}
		c := s.Claimable(10, 0)
		s.Claimed(c, []int32{3})
		p := s.Reconcile(held(span(0, 3)...), 2, time.Minute, t0)
		if !s.Releasing() {
			t.Fatal("Releasing() with 2 and 3 being given up = false")
		}
		s.Drop(p.Release, p.Epochs) // 2 goes, 3 has a row in flight
		if got, want := releasedOf(t, p), releasedAt(t0, 2); !slices.Equal(got, want) {
			t.Fatalf("Release = %+v, want %+v", got, want)
		}
		if !s.Releasing() {
			t.Fatal("Releasing() with 3 still being given up = false")
		}
		s.Settled([]Fence{{3, c.Epoch(3)}})
		p = s.Reconcile(held(0, 1, 3), 2, time.Minute, t0.Add(time.Second))
		s.Drop(p.Release, p.Epochs)
		if s.Releasing() {
			t.Error("Releasing() after every bucket given up was released = true")
		}
		assertAll(t, s, held(0, 1))
	})
}

// assertAll checks that s.All() lists exactly want, each with its epoch.
func assertAll(t *testing.T, s *State, want map[int32]int64) {
	t.Helper()
	ids, epochs := s.All()
	if len(ids) != len(epochs) {
		t.Fatalf("All() = %d ids, %d epochs", len(ids), len(epochs))
	}
	got := make(map[int32]int64, len(ids))
	for i, id := range ids {
		if _, dup := got[id]; dup {
			t.Errorf("All() lists bucket %d twice", id)
		}
		got[id] = epochs[i]
	}
	if !maps.Equal(got, want) {
		t.Errorf("All() = %v, want %v", got, want)
	}
	if s.Owned() != len(want) {
		t.Errorf("Owned() = %d, want %d", s.Owned(), len(want))
	}
}

// TestStateConcurrentUse runs claims, settles and rounds at once (for the
// race detector), then checks that everything settled lets every bucket go.
func TestStateConcurrentUse(t *testing.T) {
	t.Parallel()
	const rowLease = time.Minute
	s := stateWith(t, span(0, Count-1)...)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c := s.Claimable(16, w%3)
				var rows []int32
				var fences []Fence
				for j, id := range c.Buckets {
					for range min(int(c.Shares[j]), 1+i%2) {
						rows = append(rows, id)
						fences = append(fences, Fence{id, c.Epochs[j]})
					}
				}
				s.Claimed(c, rows)
				s.Settled(fences)
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			target := Count - i%Count/2
			s.Reconcile(held(span(0, Count-1)...), target, rowLease, t0.Add(time.Duration(i)*time.Millisecond))
			_, _ = s.All()
			_ = s.Releasing()
			_ = s.Owned()
		}
	})
	wg.Wait()
	for len(s.Drained()) > 0 {
		<-s.Drained()
	}
	p := s.Reconcile(held(span(0, Count-1)...), 0, rowLease, t0.Add(time.Second))
	if got := releasedOf(t, p); len(got) != Count {
		t.Fatalf("released %d buckets once everything settled, want %d", len(got), Count)
	}
	s.Drop(p.Release, p.Epochs)
	if s.Owned() != 0 || s.Releasing() {
		t.Errorf("Owned() = %d, Releasing() = %v, want 0, false", s.Owned(), s.Releasing())
	}
}
