package relay

import (
	"errors"
	"testing"
	"time"
)

// A sink that is unavailable for a moment (its connection being made as
// the relay starts) is not reported; one that stays unavailable is, once,
// and so is its recovery.
func TestSinkWatch_ReportsOutagesPastTheGraceOnly(t *testing.T) {
	down := errors.New("not connected to NATS")
	t0 := time.Now()
	w := &sinkWatch{}
	if msg, _, _ := w.available(t0, down); msg != "" {
		t.Errorf("at once: %q, want nothing", msg)
	}
	if msg, _, _ := w.available(t0.Add(10*time.Millisecond), nil); msg != "" {
		t.Errorf("a blip's end: %q, want nothing", msg)
	}

	w.available(t0, down)
	msg, _, isErr := w.available(t0.Add(unavailableGrace), down)
	if !isErr || msg == "" {
		t.Errorf("after the grace: %q (error %v), want the outage at error level", msg, isErr)
	}
	if msg, _, _ := w.available(t0.Add(unavailableGrace+time.Second), down); msg != "" {
		t.Errorf("a second later: %q, want nothing until the reminder", msg)
	}
	if msg, _, isErr := w.available(t0.Add(2*time.Second), nil); msg != "sink available again" || isErr {
		t.Errorf("recovery: %q, want sink available again at info", msg)
	}
}
