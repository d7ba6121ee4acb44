// Package testlog is the tests' logger: what a test's components log goes
// to a Buffer the test reads, safe for their many goroutines, and the
// warnings and errors to the test's output as well.
package testlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// minWait is the shortest Wait: a timeout bounds how long a failing test
// takes to say so, and a machine that runs other work beside the suite can
// be many times slower than an idle one (as internal/testkit/waitfor's).
const minWait = 30 * time.Second

// New returns a text logger for t and the Buffer that keeps its records at
// level and above. Records at warn and above also go to t's output, every
// record from debug up with TEST_LOG set (which turns the debug log on).
func New(t testing.TB, level slog.Level) (*slog.Logger, *Buffer) {
	b := &Buffer{}
	return slog.New(slog.NewMultiHandler(
		slog.NewTextHandler(b, &slog.HandlerOptions{Level: level}),
		slog.NewTextHandler(output(t), &slog.HandlerOptions{Level: outputLevel()}),
	)), b
}

// NewJSON is New with the Buffer's records in JSON, for tests that read
// their attributes (Records); t's output stays text.
func NewJSON(t testing.TB, level slog.Level) (*slog.Logger, *Buffer) {
	b := &Buffer{}
	return slog.New(slog.NewMultiHandler(
		slog.NewJSONHandler(b, &slog.HandlerOptions{Level: level}),
		slog.NewTextHandler(output(t), &slog.HandlerOptions{Level: outputLevel()}),
	)), b
}

// outputLevel is the level from which records go to the test's output.
func outputLevel() slog.Level {
	if os.Getenv("TEST_LOG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// testOutput writes to a test's output until the test's cleanup: a
// goroutine that logs after its test ended must not panic the run.
type testOutput struct {
	mu    sync.Mutex
	t     testing.TB
	ended bool
}

// output returns t's output, closed at t's cleanup. Registered when the
// logger is made, before the components that log to it, the cleanup runs
// after theirs: what they log while stopping is shown.
func output(t testing.TB) *testOutput {
	o := &testOutput{t: t}
	t.Cleanup(func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.ended = true
	})
	return o
}

func (o *testOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		_, _ = o.t.Output().Write(p)
	}
	return len(p), nil
}

// Buffer is a log kept in memory for a test to read, safe for concurrent
// writes. Its zero value is empty and ready to use, as any handler's
// destination.
type Buffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // closed at the next write; nil until Wait asks
}

// Write implements io.Writer: a handler writes one record a call.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wrote != nil {
		close(b.wrote)
		b.wrote = nil
	}
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines that contain every one of substrs (all lines
// when there are none): Lines("level=ERROR", "refused") in a text log.
func (b *Buffer) Lines(substrs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lines(substrs)
}

func (b *Buffer) lines(substrs []string) []string {
	var out []string
	for line := range strings.SplitSeq(b.buf.String(), "\n") {
		if line != "" && containsAll(line, substrs) {
			out = append(out, line)
		}
	}
	return out
}

func containsAll(s string, substrs []string) bool {
	for _, sub := range substrs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Records returns the records of a JSON log (NewJSON) whose message is msg,
// each as its attributes by key.
func (b *Buffer) Records(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range b.Lines() {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec[slog.MessageKey] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Wait waits until a line contains every one of substrs and returns the
// first such line, failing t with the log after timeout (at least 30
// seconds). It wakes at each write, never at a guessed interval.
func (b *Buffer) Wait(t testing.TB, timeout time.Duration, substrs ...string) string {
	t.Helper()
	timeout = max(timeout, minWait)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		found := b.lines(substrs)
		if b.wrote == nil {
			b.wrote = make(chan struct{})
		}
		wrote := b.wrote
		b.mu.Unlock()
		if len(found) > 0 {
			return found[0]
		}
		select {
		case <-wrote:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for a log line with %q; the log:\n%s", timeout, substrs, b.String())
		}
	}
}
