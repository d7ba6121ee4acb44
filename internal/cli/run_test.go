package cli

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// closableWriter is a writer that counts the writes made after close: a
// command that returns must leave nothing running that writes to its
// standard error (a test reading it, or main exiting, would race it).
type closableWriter struct {
	mu     sync.Mutex
	closed bool
	late   []string
}

func (w *closableWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.late = append(w.late, string(p))
	}
	return len(p), nil
}

func (w *closableWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}

func (w *closableWriter) lateWrites() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.late...)
}

// TestRun_LeavesNothingLoggingAfterItReturns: run fails at start (the
// schema is behind) while its sink's start-up check still waits for a NATS
// server that never answers and the NATS client's goroutines log its
// reconnect attempts; nothing reaches stderr once run has returned (CI's
// race detector once caught a write to stderr racing one inside Main).
func TestRun_LeavesNothingLoggingAfterItReturns(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	stderr := &closableWriter{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := run(ctx, []string{"run"}, []string{
		"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name, "RELAY_MIGRATE=false",
		"NATS_URL=nats://127.0.0.1:1", "NATS_SUBJECT_PREFIX=events.", "RELAY_HTTP_ADDR=",
	}, &bytes.Buffer{}, stderr)
	stderr.close()
	if code != exitFailure {
		t.Fatalf("exit %d, want %d (the schema is behind)", code, exitFailure)
	}
	time.Sleep(2 * time.Second) // long enough for a leaked check to fail and log
	if late := stderr.lateWrites(); len(late) > 0 {
		t.Errorf("written to stderr after run returned: %q", strings.Join(late, ""))
	}
}
