package cli

import (
	"io"
	"sync"
)

// commandWriter is a command's standard output or error as Main hands it
// to the command: writes are serialized, and they end when Main returns.
// A goroutine a command leaves behind (a broker client's callback logging
// its last reconnect attempt after the sink closed) must not write to the
// caller's writer once the caller has its exit code: the caller reads the
// writer then (the tests do), or the process exits. Such late lines are
// dropped; the binary's process would have ended before printing them.
type commandWriter struct {
	mu   sync.Mutex
	w    io.Writer
	done bool
}

// Write writes p to the caller's writer, or drops it once Main returned.
func (c *commandWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return len(p), nil
	}
	return c.w.Write(p)
}

// end stops the writes to the caller's writer.
func (c *commandWriter) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
}

// underlying returns the caller's writer behind w, to tell a terminal.
func underlying(w io.Writer) io.Writer {
	if c, ok := w.(*commandWriter); ok {
		return c.w
	}
	return w
}
