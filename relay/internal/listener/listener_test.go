package listener

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

func TestBroadcast_WakesEveryWaiterOnce(t *testing.T) {
	b := NewBroadcast()
	first, second := b.Wait(), b.Wait()
	b.Wake()
	for _, ch := range []<-chan struct{}{first, second} {
		select {
		case <-ch:
		default:
			t.Fatal("a waiter was not woken")
		}
	}
	select {
	case <-b.Wait():
		t.Fatal("a wait begun after the wake was woken by it")
	default:
	}
}

// TestListener_AnInsertWakesItsSchemasSubscriber: an insert into the
// outbox table (its trigger's NOTIFY) wakes the subscriber of that schema,
// once the listener listens and its probe came back.
func TestListener_AnInsertWakesItsSchemasSubscriber(t *testing.T) {
	db := dbtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	l := New(Config{Pool: db.Pool})
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	woken, unsubscribe := l.Subscribe(db.Name)
	defer unsubscribe()
	waitfor.Condition(t, 10*time.Second, "the listener listening", l.Listening)
	// The trigger notifies while a relay that asked for it is alive.
	db.Exec(t, `INSERT INTO %s.relays (id, version, mode, notify) VALUES ('test', 'test', 'unordered', true)`)
	wait := woken.Wait()
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('events.a', 'x')`)
	select {
	case <-wait:
	case <-time.After(10 * time.Second):
		t.Fatal("the insert's notification did not wake the schema's subscriber")
	}
}
