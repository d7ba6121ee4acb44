package buckets

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// A relay's rounds come five times per renewal (soon) for Times.Forming
// after they last saw the relays alive change, its own start included:
// when relays start one after another, the one that holds every bucket
// sees each newcomer within a fifth of a renewal and starts giving up its
// excess. Once the relays alive stay the same for Forming, a relay that
// is not short of its share rounds once per renewal again.
func TestRounds_ComeSoonerWhileTheRelaysAliveChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModePartitioned)
	owner := func(id string) *Owner { return testOwner(db, id) }
	round := func(o *Owner) bool {
		t.Helper()
		short, err := o.round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return short
	}
	a, b := owner("relay-a"), owner("relay-b")
	forming := a.times.Forming
	if forming != 10*time.Second {
		t.Fatalf("Forming with a 30 s row lease = %s, want ten renewals of 1 s", forming)
	}

	if round(a) {
		t.Fatal("the only relay is short of its share after its first round")
	}
	if a.Owned() != 64 {
		t.Fatalf("the only relay owns %d buckets, want 64", a.Owned())
	}
	now := time.Now()
	if !a.soon(false, now) {
		t.Error("a relay that has just started rounds once per renewal; want five times while the relays alive form")
	}
	if a.soon(false, now.Add(forming)) {
		t.Errorf("a relay whose relays alive stayed the same for %s still rounds five times per renewal", forming)
	}
	// Rounds that see the same relays alive do not extend the window.
	a.changed = now.Add(-forming)
	round(a)
	if a.soon(false, time.Now()) {
		t.Error("a round that saw the same relays alive made the next ones come sooner")
	}

	// relay-b starts: it finds every bucket taken. relay-a's next round
	// sees it, starts giving up half, and rounds five times per renewal.
	if !round(b) {
		t.Error("relay-b is not short of its share though relay-a holds every bucket")
	}
	round(a) // nothing in flight: it releases its excess in this round
	if !a.soon(false, time.Now()) {
		t.Error("relay-a's round saw relay-b join, and its next round comes a renewal later; want a fifth")
	}
	if b.Owned() != 0 {
		t.Fatalf("relay-b owns %d buckets before asking again", b.Owned())
	}
	round(b)
	if a.Owned() != 32 || b.Owned() != 32 {
		t.Errorf("after the handover relay-a owns %d buckets and relay-b %d, want 32 each", a.Owned(), b.Owned())
	}
}
