package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

func TestOverview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	// As TestStatus: on the default sink two due rows (one 10 minutes
	// old), one in flight, one in backoff, one delayed; on webhook one due
	// row.
	db.ExecAsRelay(t, `
INSERT INTO %s.messages (topic, payload, destination, available_at, attempts, leased_by, leased_until) VALUES
    ('a', 'x', NULL,      now() - interval '10 minutes', 0, NULL,      NULL),
    ('a', 'x', NULL,      now(),                         1, 'relay-1', now() - interval '1 second'),
    ('a', 'x', NULL,      now(),                         1, 'relay-1', now() + interval '30 seconds'),
    ('a', 'x', NULL,      now() + interval '1 minute',   2, NULL,      NULL),
    ('a', 'x', NULL,      now() + interval '1 hour',     0, NULL,      NULL),
    ('a', 'x', 'webhook', now(),                         0, NULL,      NULL)`)
	insertDead(t, db, "a", "", "d1", "permanent", "boom")
	insertDead(t, db, "a", "", "d2", "exhausted", "timeout")
	db.Exec(t, `INSERT INTO %s.relays (id, version, mode, last_seen) VALUES
	            ('relay-a', 'v1', 'unordered', now()), ('relay-b', 'v1', 'unordered', now() - interval '5 seconds'),
	            ('relay-gone', 'v0', 'unordered', now() - interval '5 minutes')`)
	// Delivered within the hour: 30 seconds, 2, 10 and 58 minutes ago,
	// and one duplicate; before it, 61 minutes and 2 hours ago. (58 and 61
	// leave a minute for the clock to pass a minute's end meanwhile.)
	for i, ago := range []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, 58 * time.Minute, 61 * time.Minute, 2 * time.Hour} {
		insertArchived(t, db, "a", "", "a"+string(rune('0'+i)), ago, false)
	}
	insertArchived(t, db, "a", "", "a1", 2*time.Minute, true)

	ov, err := ops(t, db).Overview(ctx, admin.OverviewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := ov.Messages
	if m.Pending != 6 || m.Due != 3 || m.InFlight != 1 || m.Backoff != 1 || m.Delayed != 1 || m.Destination != "" {
		t.Errorf("messages: %+v; want 6 pending, 3 due, 1 in flight, 1 in backoff, 1 delayed, over every destination", m)
	}
	if m.OldestDueAt == nil || m.OldestDueAgeSeconds < 590 || m.OldestDueAgeSeconds > 900 {
		t.Errorf("oldest due age %vs (at %v), want about 600s", m.OldestDueAgeSeconds, m.OldestDueAt)
	}
	if ov.Mode != "unordered" || ov.DeadLetters != 2 || ov.RelaysAlive != 2 || ov.Relays != 3 {
		t.Errorf("mode %q, %d dead letters, %d of %d relays alive; want unordered, 2, 2 of 3", ov.Mode, ov.DeadLetters, ov.RelaysAlive, ov.Relays)
	}
	checkMinutes(t, ov, admin.OverviewMinutesDefault)
	var deduplicated int64
	for _, c := range ov.DeliveredPerMinute {
		deduplicated += c.Deduplicated
	}
	if ov.DeliveredInWindow != 4 || deduplicated != 1 {
		t.Errorf("delivered in the hour %d, deduplicated %d; want 4 and 1", ov.DeliveredInWindow, deduplicated)
	}

	// The last 5 minutes hold the deliveries of 30 seconds and 2 minutes
	// ago.
	ov, err = ops(t, db).Overview(ctx, admin.OverviewOptions{Minutes: 5})
	if err != nil {
		t.Fatal(err)
	}
	checkMinutes(t, ov, 5)
	if ov.DeliveredInWindow != 2 {
		t.Errorf("delivered in 5 minutes: %d, want 2", ov.DeliveredInWindow)
	}
	ov, err = ops(t, db).Overview(ctx, admin.OverviewOptions{Minutes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	checkMinutes(t, ov, admin.OverviewMinutesMax)
	if ov.DeliveredInWindow != 6 {
		t.Errorf("delivered in a week: %d, want 6", ov.DeliveredInWindow)
	}
}

// checkMinutes checks that ov counts n minutes, one apart, oldest first,
// up to the one its clock is in.
func checkMinutes(t *testing.T, ov *admin.Overview, n int) {
	t.Helper()
	per := ov.DeliveredPerMinute
	if len(per) != n {
		t.Fatalf("%d minutes counted, want %d", len(per), n)
	}
	for i := 1; i < len(per); i++ {
		if d := per[i].Minute.Sub(per[i-1].Minute); d != time.Minute {
			t.Fatalf("minute %d is %s after the one before, want a minute", i, d)
		}
	}
	if last := per[len(per)-1].Minute; !last.Equal(ov.At.Truncate(time.Minute)) {
		t.Errorf("the last minute is %v, want the clock's %v", last, ov.At)
	}
}

func TestOverview_EmptySchema(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ov, err := ops(t, db).Overview(context.Background(), admin.OverviewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ov.Messages != (admin.DestinationStatus{}) || ov.DeadLetters != 0 || ov.Relays != 0 || ov.DeliveredInWindow != 0 || ov.At.IsZero() {
		t.Errorf("empty schema: %+v", ov)
	}
	checkMinutes(t, ov, admin.OverviewMinutesDefault)
}

// In ordered mode the rows behind an older row of their key are waiting,
// not due, as Status counts them.
func TestOverview_OrderedModeCountsWaitingRows(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	db.SetMode(t, "ordered")
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('t', 'x', 'k'), ('t', 'x', 'k'), ('t', 'x', 'k'), ('t', 'x', NULL)`)
	ov, err := ops(t, db).Overview(context.Background(), admin.OverviewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ov.Mode != "ordered" || ov.Messages.Pending != 4 || ov.Messages.Due != 2 || ov.Messages.Waiting != 2 {
		t.Errorf("ordered: mode %q, messages %+v; want 4 pending, 2 due, 2 waiting", ov.Mode, ov.Messages)
	}
}
