package keychain

import (
	"testing"
	"time"
)

func TestClaimed_ARowFollowsThePreviousRowOfItsKeyInTheClaim(t *testing.T) {
	c := New(Config{})
	lease := time.Now().Add(time.Minute)
	self, prev := c.Claimed([]Row{{ID: 1, Key: "a"}, {ID: 2, Key: "b"}, {ID: 3, Key: "a"}}, lease)
	if prev[0] != nil || prev[1] != nil || prev[2] != self[0] {
		t.Fatalf("prev = %v, want nil, nil, the link of row 1", prev)
	}
	if got := c.State(prev[2]); got != Pending {
		t.Fatalf("row 3 may be sent before row 1's outcome: %v", got)
	}
	c.Resolve(self[0], true)
	if got := c.State(prev[2]); got != Passed {
		t.Fatalf("after row 1 was delivered, row 3 says %v, want Passed", got)
	}
}

func TestClaimed_TheFirstRowOfAKeyFollowsTheRowTheClaimNamed(t *testing.T) {
	c := New(Config{})
	lease := time.Now().Add(time.Minute)
	first, _ := c.Claimed([]Row{{ID: 1, Key: "a"}}, lease)
	_, prev := c.Claimed([]Row{{ID: 2, Key: "a", After: 1}, {ID: 3, Key: "b"}}, lease)
	if prev[0] != first[0] || prev[1] != nil {
		t.Fatalf("prev = %v, want row 1's link, nil", prev)
	}
	c.Resolve(first[0], false)
	if got := c.State(prev[0]); got != Stopped {
		t.Fatalf("row 1 was retried: row 2 says %v, want Stopped", got)
	}
}

func TestResolve_AStoppedRowStopsTheWholeRestOfItsKey(t *testing.T) {
	c := New(Config{})
	lease := time.Now().Add(time.Minute)
	self, _ := c.Claimed([]Row{{ID: 1, Key: "a"}, {ID: 2, Key: "a"}, {ID: 3, Key: "a"}}, lease)
	later, _ := c.Claimed([]Row{{ID: 4, Key: "a", After: 3}}, lease)
	c.Resolve(self[0], false)
	for _, l := range append(self[1:], later...) {
		if got := c.State(l); got != Stopped {
			t.Errorf("row %d says %v after row 1 stopped, want Stopped", l.ID(), got)
		}
	}
}

func TestResolve_AnOutcomeCountsOnlyOnceTheRowsBeforeItResolved(t *testing.T) {
	c := New(Config{})
	lease := time.Now().Add(time.Minute)
	self, _ := c.Claimed([]Row{{ID: 1, Key: "a"}, {ID: 2, Key: "a"}}, lease)
	// Row 2 dead-lettered unsent (too large) while row 1 is in flight.
	c.Resolve(self[1], true)
	if got := c.State(self[1]); got != Pending {
		t.Fatalf("row 2 says %v while row 1 is in flight: a row behind it would overtake row 1", got)
	}
	c.Resolve(self[0], true)
	if got := c.State(self[1]); got != Passed {
		t.Fatalf("row 2 says %v once row 1 was delivered, want Passed", got)
	}
}

func TestResolve_TheFirstOutcomeCounts(t *testing.T) {
	c := New(Config{})
	self, _ := c.Claimed([]Row{{ID: 1, Key: "a"}}, time.Now().Add(time.Minute))
	c.Resolve(self[0], true)
	c.Resolve(self[0], false)
	if got := c.State(self[0]); got != Passed {
		t.Fatalf("state = %v, want Passed", got)
	}
}

func TestNamed_ARowThisRelayDoesNotHoldStopsTheRowsBehindIt(t *testing.T) {
	c := New(Config{Registration: 20 * time.Millisecond})
	_, prev := c.Claimed([]Row{{ID: 5, Key: "a", After: 4}}, time.Now().Add(time.Minute))
	changed := c.Wait(prev)
	if got := c.State(prev[0]); got != Pending {
		t.Fatalf("an unknown row says %v before Registration, want Pending", got)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no change after Registration")
	}
	if got := c.State(prev[0]); got != Stopped {
		t.Fatalf("an unknown row says %v after Registration, want Stopped", got)
	}
}

func TestNamed_ARowRegisteredLateIsTheOneTheClaimWaitsFor(t *testing.T) {
	c := New(Config{Registration: time.Minute})
	lease := time.Now().Add(time.Minute)
	// The claim of row 5 returns before the concurrent claim of row 4
	// registered its rows.
	_, prev := c.Claimed([]Row{{ID: 5, Key: "a", After: 4}}, lease)
	self, _ := c.Claimed([]Row{{ID: 4, Key: "a"}}, lease)
	if self[0] != prev[0] {
		t.Fatal("row 4 registered as a link other than the one row 5 follows")
	}
	c.Resolve(self[0], true)
	if got := c.State(prev[0]); got != Passed {
		t.Fatalf("state = %v, want Passed", got)
	}
}

func TestClaimed_ARowClaimedAgainStartsANewLink(t *testing.T) {
	c := New(Config{})
	lease := time.Now().Add(time.Minute)
	old, _ := c.Claimed([]Row{{ID: 1, Key: "a"}}, lease)
	c.Resolve(old[0], false)
	again, _ := c.Claimed([]Row{{ID: 1, Key: "a"}}, lease)
	if again[0] == old[0] || c.State(again[0]) != Pending {
		t.Fatalf("a row claimed again keeps its old outcome")
	}
}

func TestBegin_SettledLinksAreForgottenOnceNoEarlierClaimRuns(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(Config{Now: func() time.Time { return now }})
	self, _ := c.Claimed([]Row{{ID: 1, Key: "a"}}, now.Add(time.Minute))
	end := c.Begin() // a claim that may see row 1 still leased
	now = now.Add(time.Second)
	c.Settled(self)
	c.Begin()()
	if c.Len() != 1 {
		t.Fatal("a settled link was forgotten while a claim that began before the settle ran")
	}
	end()
	now = now.Add(time.Second)
	c.Begin()()
	if c.Len() != 0 {
		t.Fatalf("%d links held after their settle and every earlier claim", c.Len())
	}
}

func TestBegin_LinksWhoseLeaseIsOverAreForgotten(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(Config{Now: func() time.Time { return now }})
	c.Claimed([]Row{{ID: 1, Key: "a"}}, now.Add(time.Minute))
	now = now.Add(2 * time.Minute)
	c.Begin()()
	if c.Len() != 0 {
		t.Fatal("a link outlived its lease")
	}
}

func TestKeys_TheKeysOfTheRowsHeldUntilTheyAreSettledOrTheirLeaseIsOver(t *testing.T) {
	now := time.Now()
	c := New(Config{Now: func() time.Time { return now }})
	keys := func() map[string]bool {
		t.Helper()
		got := map[string]bool{}
		for _, k := range c.Keys() {
			if got[k] {
				t.Fatalf("Keys lists %q twice", k)
			}
			got[k] = true
		}
		return got
	}
	self, _ := c.Claimed([]Row{{ID: 1, Key: "a"}, {ID: 2, Key: "b"}, {ID: 3, Key: "a"}}, now.Add(time.Minute))
	short, _ := c.Claimed([]Row{{ID: 4, Key: "c"}}, now.Add(time.Second))
	if got := keys(); len(got) != 3 || !got["a"] || !got["b"] || !got["c"] {
		t.Fatalf("Keys = %v, want a, b and c", got)
	}
	c.Settled(self[:1])
	if got := keys(); !got["a"] {
		t.Fatalf("Keys = %v after row 1 was settled: row 3 of a is still held", got)
	}
	c.Settled(self[1:])
	c.Settled(self[1:]) // a settle given up and then done: counted once
	if got := keys(); len(got) != 1 || !got["c"] {
		t.Fatalf("Keys = %v after rows 1-3 were settled, want c alone", got)
	}
	now = now.Add(2 * time.Second)
	c.Begin()() // forgets the link whose lease is over
	if got := keys(); len(got) != 0 {
		t.Fatalf("Keys = %v once row 4's lease (%v) was over, want none", got, short[0].expires)
	}
	again, _ := c.Claimed([]Row{{ID: 5, Key: "d"}}, now.Add(time.Minute))
	c.Claimed([]Row{{ID: 5, Key: "d"}}, now.Add(time.Minute)) // claimed again: a new link, the old one no longer counts
	c.Settled(again)
	if got := keys(); len(got) != 1 || !got["d"] {
		t.Fatalf("Keys = %v, want d: the row's new link is not settled", got)
	}
}

func TestKeys_ARowNamedBeforeItIsRegisteredCountsOnceRegistered(t *testing.T) {
	now := time.Now()
	c := New(Config{Now: func() time.Time { return now }})
	lease := now.Add(time.Minute)
	// A claim names row 1 (a concurrent claim of this relay leased it) as
	// the row its first row of a follows: not this relay's to count yet.
	c.Claimed([]Row{{ID: 2, Key: "a", After: 1}}, lease)
	if got := c.Keys(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Keys = %v, want a (row 2)", got)
	}
	first, _ := c.Claimed([]Row{{ID: 1, Key: "a"}}, lease)
	end := c.Begin() // a claim under way: settled links are kept for it
	c.Settled(first)
	if got := c.Keys(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Keys = %v after row 1 was settled, want a (row 2 is held)", got)
	}
	end()
	now = now.Add(time.Millisecond)
	c.Begin()()
	if got := c.Keys(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Keys = %v once row 1's link was forgotten, want a (row 2)", got)
	}
}
