package floor

import (
	"math"
	"testing"
	"time"
)

// TestParseSnapshot reads pg_snapshot's text form, and refuses what is not
// one.
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

// TestState_Advance follows a floor through refreshes: what holds it
// back, what lets it pass, and where it goes back to.
func TestState_Advance(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ptr := func(t time.Time) *time.Time { return &t }
	f := NewState()
	step := func(name string, fromKnown bool, rd refreshRead, want time.Time) {
		t.Helper()
		from := txSince{at: f.at, id: f.id}
		if got := f.advance(rd.start, from, fromKnown, rd); !got.Equal(want) {
			t.Errorf("%s: floor = %v, want %v", name, got, want)
		}
	}
	snap := func(xip ...uint64) snapshot { return snapshot{xmin: 1, xmax: 1000, xip: xip} }

	// The first refresh cannot know when anything in progress had its id,
	// listed (10) or not: any time.
	step("first", false, refreshRead{start: at(0), snapshot: snap(10), mark: 100}, time.Time{})
	// Transactions above mark 100 had their ids after the first refresh
	// began (at 0): 110 is young. 10 ended: the refresh started from the
	// oldest row, which covers its rows.
	step("second", false, refreshRead{start: at(100), snapshot: snap(110), mark: 200, oldest: ptr(at(50))}, at(0))
	step("110 still young", true, refreshRead{start: at(200), snapshot: snap(110), mark: 300, oldest: ptr(at(150))}, at(0))
	// Nothing listed: the oldest visible row, unless the last refresh's
	// start is older (an unlisted transaction above its mark).
	step("110 ended", true, refreshRead{start: at(300), snapshot: snap(), mark: 400, oldest: ptr(at(250))}, at(200))
	step("empty", true, refreshRead{start: at(400), snapshot: snap(), mark: 500}, at(300))
	// 450 is listed first now, above mark 400 (refresh at 300) and below
	// mark 500: it had its id after 300.
	step("450 young", true, refreshRead{start: at(500), snapshot: snap(450), mark: 600}, at(300))
	// Past patience, 450 no longer holds the floor back...
	p := int(patience / time.Millisecond)
	step("450 old", true, refreshRead{start: at(500 + p), snapshot: snap(450), mark: 700}, at(500))
	step("450 older", true, refreshRead{start: at(5000), snapshot: snap(450), mark: 800}, at(500+p))
	// ...and when it ends the floor goes back to its time, whatever the
	// oldest row above the floor.
	step("450 ended", true, refreshRead{start: at(6000), snapshot: snap(), mark: 900, oldest: ptr(at(5500))}, at(300))
	// A row due later holds nothing.
	step("scheduled row", true, refreshRead{start: at(7000), snapshot: snap(), mark: 950, oldest: ptr(at(90000))}, at(6000))

	// A transaction in progress since before the first refresh may have
	// rows anywhere: when it ends, the floor goes back to the oldest row.
	g := NewState()
	g.advance(at(0), txSince{}, false, refreshRead{start: at(0), snapshot: snap(7), mark: 20})
	g.advance(at(100), txSince{at: g.at}, false, refreshRead{start: at(100), snapshot: snap(7), mark: 30})
	if got := g.advance(at(2000), txSince{at: g.at}, true, refreshRead{start: at(2000), snapshot: snap(7), mark: 40}); !got.Equal(at(100)) {
		t.Errorf("an old transaction in progress: floor = %v, want the last refresh's start", got)
	}
	if got := g.advance(at(9000), txSince{at: g.at}, true, refreshRead{start: at(9000), snapshot: snap(), mark: 50}); !got.IsZero() {
		t.Errorf("a transaction older than the first refresh ended: floor = %v, want any time", got)
	}
	if c := g.Current(); c.InfinityModifier >= 0 {
		t.Errorf("current = %+v, want -infinity", c)
	}
	if refresh, _, known := g.due(at(9000).Add(refreshIdleEvery), 0); !refresh || known {
		t.Errorf("after going back to any time: due = %v, %v; want a refresh from the oldest row", refresh, known)
	}
}

// TestState_AdvanceIDs follows the id floor through refreshes: the
// next id of the last refresh, unless a young transaction in progress or
// the oldest row holds it back, and back to an old transaction's ids when
// it ends.
func TestState_AdvanceIDs(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	id := func(v int64) *int64 { return &v }
	f := NewState()
	step := func(name string, fromKnown bool, rd refreshRead, want int64) {
		t.Helper()
		f.advance(rd.start, txSince{at: f.at, id: f.id}, fromKnown, rd)
		if got, _, _ := f.IDs(); got != want {
			t.Errorf("%s: id floor = %d, want %d", name, got, want)
		}
	}
	snap := func(xip ...uint64) snapshot { return snapshot{xmin: 1, xmax: 1000, xip: xip} }

	if got, _, _ := f.IDs(); got != math.MinInt64 {
		t.Errorf("before the first refresh: id floor = %d, want the smallest bigint", got)
	}
	// The first refresh knows nothing of the transactions in progress.
	step("first", false, refreshRead{start: at(0), snapshot: snap(10), mark: 100, next: 500}, math.MinInt64)
	// 110 is above mark 100: its rows take ids from 500 up. The oldest
	// row (520) is above that.
	step("110 young", false, refreshRead{start: at(100), snapshot: snap(110), mark: 200, next: 600, oldestID: id(520)}, 500)
	step("110 ended", true, refreshRead{start: at(200), snapshot: snap(), mark: 300, next: 700, oldestID: id(650)}, 600)
	// The oldest row pending holds the floor (a row in backoff, 650).
	step("a row pending", true, refreshRead{start: at(300), snapshot: snap(), mark: 400, next: 800, oldestID: id(650)}, 650)
	step("delivered", true, refreshRead{start: at(400), snapshot: snap(), mark: 500, next: 900}, 800)
	// 450: listed first now, below mark 500, above mark 400 (next 800).
	step("450 young", true, refreshRead{start: at(500), snapshot: snap(450), mark: 600, next: 1000}, 800)
	p := int(patience / time.Millisecond)
	step("450 old", true, refreshRead{start: at(500 + p), snapshot: snap(450), mark: 700, next: 1100}, 1000)
	if _, passed, ids := f.IDs(); len(passed) != 1 || passed[0] != "450" || len(ids) != 1 || ids[0] != 800 {
		t.Errorf("450 old: passed = %v with ids %v, want [450] with [800]: claims must check whether it ended, and look up from 800 if it did", passed, ids)
	}
	step("450 older", true, refreshRead{start: at(600 + p), snapshot: snap(450), mark: 800, next: 1200}, 1100)
	// When it ends, the floor goes back to its ids, once.
	step("450 ended", true, refreshRead{start: at(700 + p), snapshot: snap(), mark: 900, next: 1300, oldestID: id(1250)}, 800)
	step("after", true, refreshRead{start: at(800 + p), snapshot: snap(), mark: 950, next: 1400}, 1300)
	if _, passed, _ := f.IDs(); len(passed) != 0 {
		t.Errorf("after 450 ended: passed = %v, want none", passed)
	}
	// A sequence that cannot tell (cached, cycling) gives no bound.
	step("cached sequence", true, refreshRead{start: at(900 + p), snapshot: snap(), mark: 960, next: math.MinInt64, oldestID: id(1350)}, 1350)
	step("cached sequence, then", true, refreshRead{start: at(1000 + p), snapshot: snap(), mark: 970, next: 1500}, math.MinInt64)
	if refresh, from, known := f.due(at(1000+p).Add(refreshIdleEvery), 0); !refresh || !known || from.id != math.MinInt64 {
		t.Errorf("after an unknown id floor: due = %v, %+v, %v; want a refresh from the time floor and the smallest id", refresh, from, known)
	}
}

// TestState_Due spaces refreshes and rescans.
func TestState_Due(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	f := NewState()
	if refresh, _, known := f.due(t0, 0); !refresh || known {
		t.Fatalf("first due = %v, %v; want a refresh from the oldest row", refresh, known)
	}
	f.advance(t0.Add(-refreshIdleEvery), txSince{}, false, refreshRead{start: t0.Add(-refreshIdleEvery), snapshot: snapshot{xmin: 1, xmax: 1}, mark: 1, next: 10})
	f.advance(t0, txSince{at: f.at, id: f.id}, true, refreshRead{start: t0, snapshot: snapshot{xmin: 1, xmax: 1}, mark: 2, next: 20})
	if refresh, _, _ := f.due(t0.Add(refreshEvery), 0); refresh {
		t.Error("idle: refreshed after refreshEvery, want refreshIdleEvery")
	}
	f.Found()
	if refresh, from, known := f.due(t0.Add(refreshEvery), 0); !refresh || !known || !from.at.Equal(t0.Add(-refreshIdleEvery)) || from.id != 10 {
		t.Errorf("busy: due = %v, %v, %v; want a refresh from the floor", refresh, from, known)
	}
	// Rescans are the rescan loop's, beside the refreshes (rescanLoop).
	if refresh, _, known := f.due(t0.Add(-refreshIdleEvery).Add(rescanEvery), 0); !refresh || !known {
		t.Errorf("after rescanEvery: due = %v, %v; want a refresh from the floor", refresh, known)
	}
	if f.rescanDue(t0.Add(-refreshIdleEvery).Add(rescanEvery / 2)) {
		t.Error("a rescan is due half a rescanEvery after the first refresh")
	}
	t1 := t0.Add(-refreshIdleEvery).Add(rescanEvery)
	if !f.rescanDue(t1) || f.rescanDue(t1) {
		t.Fatal("after rescanEvery: want one rescan due, and no other while it runs")
	}
	// A rescan that took 3 s (a pinned horizon's dead entries) is the
	// last for 300 s, not 60; the next refresh lowers the floors to the
	// oldest row it read.
	oldest, oldestID := t0.Add(-time.Hour), int64(5)
	f.rescanDone(t1, 3*time.Second, &oldest, &oldestID)
	if f.rescanDue(t1.Add(300 * time.Second)) {
		t.Error("a rescan is due with no refresh since the last (an idle outbox's refreshes back off)")
	}
	f.Found()
	_, from, _ := f.due(t1, 0)
	f.advance(t1.Add(time.Second), from, true, refreshRead{start: t1, snapshot: snapshot{xmin: 3, xmax: 3}, mark: 3, next: 30})
	if !f.at.Equal(oldest) || f.id != oldestID {
		t.Errorf("after a rescan read the oldest row at %v (id %d), the floors are %v and %d", oldest, oldestID, f.at, f.id)
	}
	if f.rescanDue(t1.Add(299 * time.Second)) {
		t.Error("a rescan is due 299 s after one that took 3 s")
	}
	if !f.rescanDue(t1.Add(300 * time.Second)) {
		t.Error("no rescan is due 300 s after one that took 3 s")
	}
	f.advance(t1.Add(time.Second), txSince{at: f.at, id: f.id}, true, refreshRead{start: t1.Add(time.Second), snapshot: snapshot{xmin: 3, xmax: 3}, mark: 4, next: 40})
	if f.at.Equal(oldest) {
		t.Error("the refresh after the next still lowers the floor to the rescan's row")
	}
}

// TestState_IDsBeforeTheFirstRefresh: claims look a key's rows up from the
// smallest bigint, passing no transaction, until a refresh has run; the
// slices are empty, not nil (pgx would send NULL arrays).
func TestState_IDsBeforeTheFirstRefresh(t *testing.T) {
	id, passed, passedIDs := NewState().IDs()
	if id != math.MinInt64 || passed == nil || len(passed) != 0 || passedIDs == nil || len(passedIDs) != 0 {
		t.Errorf("IDs = %d, %#v, %#v; want the smallest bigint and two empty slices", id, passed, passedIDs)
	}
	if c := NewState().Current(); c.InfinityModifier >= 0 || !c.Valid {
		t.Errorf("Current = %+v, want -infinity", c)
	}
}

// TestState_SetAndStatus: Set puts the floors where a test wants them, and
// Status reads them back, a copy the caller may keep.
func TestState_SetAndStatus(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	s := NewState()
	s.Set(t0, 42, []string{"7"}, []int64{40})
	if c := s.Current(); c.InfinityModifier != 0 || !c.Time.Equal(t0) {
		t.Errorf("Current = %+v, want %v", c, t0)
	}
	if id, passed, ids := s.IDs(); id != 42 || len(passed) != 1 || passed[0] != "7" || len(ids) != 1 || ids[0] != 40 {
		t.Errorf("IDs = %d, %v, %v; want 42, [7], [40]", id, passed, ids)
	}
	st := s.Status()
	if !st.Known || !st.At.Equal(t0) || st.ID != 42 || st.AnyAge != 0 || st.Rescanning || st.RescanAt != nil {
		t.Errorf("Status = %+v", st)
	}
	st.Passed[0] = "8"
	if _, passed, _ := s.IDs(); passed[0] != "7" {
		t.Error("changing a Status changed the state")
	}
}

// TestState_RescannedIfAndRescanNow: a test holds rescans off while it
// sets its scene, and then asks for one.
func TestState_RescannedIfAndRescanNow(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	s := NewState()
	// In progress at the first refresh (7): any age, until it ends.
	s.advance(t0, txSince{}, false, refreshRead{start: t0, snapshot: snapshot{xmin: 7, xmax: 8, xip: []uint64{7}}, mark: 8, next: 10})
	s.advance(t0.Add(time.Second), txSince{}, false, refreshRead{start: t0.Add(time.Second), snapshot: snapshot{xmin: 7, xmax: 9, xip: []uint64{7}}, mark: 9, next: 11})
	settled := func(st Status) bool { return st.AnyAge == 0 && !st.Rescanning }
	if s.RescannedIf(t0.Add(2*rescanEvery), settled) {
		t.Error("RescannedIf held with a transaction of any age in progress")
	}
	// 7 ended: the refresh starts from the oldest row.
	s.advance(t0.Add(2*time.Second), txSince{}, false, refreshRead{start: t0.Add(2 * time.Second), snapshot: snapshot{xmin: 10, xmax: 10}, mark: 10, next: 12})
	now := t0.Add(4 * rescanEvery)
	if !s.RescannedIf(now, settled) {
		t.Fatal("RescannedIf did not hold once 7 ended")
	}
	s.advance(now.Add(time.Second), txSince{at: s.at, id: s.id}, true, refreshRead{start: now.Add(time.Second), snapshot: snapshot{xmin: 11, xmax: 11}, mark: 11, next: 13})
	if s.rescanDue(now.Add(time.Second)) {
		t.Error("a rescan is due right after RescannedIf")
	}
	s.RescanNow()
	if !s.rescanDue(now.Add(time.Second)) {
		t.Error("no rescan due after RescanNow")
	}
}
