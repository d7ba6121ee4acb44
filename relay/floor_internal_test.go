package relay

import (
	"testing"
	"time"
)

func TestParseSnapshot(t *testing.T) {
	s, err := parseSnapshot("100:105:100,102")
	if err != nil || s.xmin != 100 || s.xmax != 105 || len(s.xip) != 2 || s.xip[1] != 102 {
		t.Errorf("parseSnapshot = %+v, %v", s, err)
	}
	if s, err := parseSnapshot("7:7:"); err != nil || len(s.xip) != 0 {
		t.Errorf("parseSnapshot(empty xip) = %+v, %v", s, err)
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:2:x"} {
		if _, err := parseSnapshot(bad); err == nil {
			t.Errorf("parseSnapshot(%q) accepted", bad)
		}
	}
}

// TestClaimFloor_Advance follows a floor through refreshes: what holds it
// back, what lets it pass, and where it goes back to.
func TestClaimFloor_Advance(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ptr := func(t time.Time) *time.Time { return &t }
	f := &claimFloor{seen: map[uint64]time.Time{}}
	step := func(name string, fromKnown bool, rd floorRead, want time.Time) {
		t.Helper()
		from := f.at
		if got := f.advance(rd.start, from, fromKnown, rd); !got.Equal(want) {
			t.Errorf("%s: floor = %v, want %v", name, got, want)
		}
	}
	snap := func(xip ...uint64) pgSnapshot { return pgSnapshot{xmin: 1, xmax: 1000, xip: xip} }

	// The first refresh cannot know when transaction 10 had its id: it
	// counts as old, and sends the floor back to the oldest row when it
	// ends.
	step("first, one in progress", false, floorRead{start: at(0), snapshot: snap(10)}, at(0))
	// 10 ended: its rows are visible, and the oldest visible row is the
	// floor; 20 is new, so it had its id after the first refresh began.
	step("10 ended, 20 young", false, floorRead{start: at(100), snapshot: snap(20), oldest: ptr(at(50))}, at(0))
	step("20 still young", true, floorRead{start: at(200), snapshot: snap(20), oldest: ptr(at(150))}, at(0))
	// Nothing in progress: the oldest visible row.
	step("20 ended", true, floorRead{start: at(300), snapshot: snap(), oldest: ptr(at(250))}, at(250))
	// Nothing visible and nothing in progress: the refresh's start.
	step("empty", true, floorRead{start: at(400), snapshot: snap()}, at(400))
	// 30 is first seen now: it had its id after the last refresh began.
	step("30 young", true, floorRead{start: at(500), snapshot: snap(30)}, at(400))
	// Past floorPatience, 30 no longer holds the floor back...
	step("30 old", true, floorRead{start: at(500 + int(floorPatience/time.Millisecond)), snapshot: snap(30)},
		at(500+int(floorPatience/time.Millisecond)))
	step("30 older", true, floorRead{start: at(5000), snapshot: snap(30)}, at(5000))
	// ...and when it ends the floor goes back to when it was first seen,
	// whatever the oldest row above the floor.
	step("30 ended", true, floorRead{start: at(6000), snapshot: snap(), oldest: ptr(at(5500))}, at(400))
	// A row below the refresh's start that is due later holds nothing.
	step("scheduled row", true, floorRead{start: at(7000), snapshot: snap(), oldest: ptr(at(90000))}, at(7000))
	// A transaction in progress since the first refresh may have rows
	// anywhere: when it ends, the floor goes back to the oldest row.
	g := &claimFloor{seen: map[uint64]time.Time{}}
	g.advance(at(0), time.Time{}, false, floorRead{start: at(0), snapshot: snap(7)})
	g.advance(at(100), g.at, true, floorRead{start: at(100), snapshot: snap(7)})
	if got := g.advance(at(9000), g.at, true, floorRead{start: at(9000), snapshot: snap()}); !got.IsZero() {
		t.Errorf("a transaction older than the first refresh ended: floor = %v, want any time", got)
	}
	if c := g.current(); c.InfinityModifier >= 0 {
		t.Errorf("current = %+v, want -infinity", c)
	}
	if refresh, _, known := g.due(at(9000).Add(floorIdleEvery)); !refresh || known {
		t.Errorf("after going back to any time: due = %v, %v; want a refresh from the oldest row", refresh, known)
	}
}

// TestClaimFloor_Due spaces refreshes and rescans.
func TestClaimFloor_Due(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	f := &claimFloor{seen: map[uint64]time.Time{}}
	if refresh, _, known := f.due(t0); !refresh || known {
		t.Fatalf("first due = %v, %v; want a refresh from the oldest row", refresh, known)
	}
	f.advance(t0, time.Time{}, false, floorRead{start: t0, snapshot: pgSnapshot{xmin: 1, xmax: 1}})
	if refresh, _, _ := f.due(t0.Add(floorEvery)); refresh {
		t.Error("idle: refreshed after floorEvery, want floorIdleEvery")
	}
	f.found()
	if refresh, from, known := f.due(t0.Add(floorEvery)); !refresh || !known || !from.Equal(t0) {
		t.Errorf("busy: due = %v, %v, %v; want a refresh from the floor", refresh, from, known)
	}
	if refresh, _, known := f.due(t0.Add(floorRescanEvery)); !refresh || known {
		t.Errorf("after floorRescanEvery: due = %v, %v; want a rescan from the oldest row", refresh, known)
	}
}
