package dbtest

import (
	"context"
	"testing"
	"time"
)

// Exclusive makes t the only test on this database server holding the slot
// named name until t ends, waiting for it meanwhile: a session advisory
// lock on a connection of its own, so that it holds across test binaries
// and whole test suites run at once. Tests that run several relay
// processes through tens of thousands of events take it, so that two of
// them never share the machine's cores and the server's connections with
// each other: each proves its point as fast alone as in a crowd.
func Exclusive(t testing.TB, name string) {
	t.Helper()
	conn, err := connect(context.Background(), URL())
	if err != nil {
		t.Fatalf("connect for the %q slot: %v", name, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) }) // ends the session: releases the lock
	const key = `SELECT pg_try_advisory_lock(hashtext('outbox-relay tests'), hashtext($1))`
	deadline := time.Now().Add(15 * time.Minute)
	for {
		var ok bool
		if err := conn.QueryRow(context.Background(), key, name).Scan(&ok); err != nil {
			t.Fatalf("take the %q slot: %v", name, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %q slot stayed taken for 15 minutes", name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
