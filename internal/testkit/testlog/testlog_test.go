package testlog_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
)

// Many goroutines log at once: every record is kept whole, one a line
// (run with -race).
func TestBuffer_KeepsEveryRecordOfConcurrentWriters(t *testing.T) {
	log, logs := testlog.New(t, slog.LevelInfo)
	const writers, each = 8, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				log.Info("sent", "writer", w, "i", i)
			}
		})
	}
	wg.Wait()
	if got := len(logs.Lines(`msg=sent`)); got != writers*each {
		t.Errorf("%d lines, want %d", got, writers*each)
	}
	if got := logs.Lines("level=INFO", "writer=3 ", "i=42"); len(got) != 1 {
		t.Errorf("lines of writer 3's record 42: %q, want one", got)
	}
	log.Debug("below the level")
	if got := logs.Lines("below the level"); len(got) != 0 {
		t.Errorf("a record below the level was kept: %q", got)
	}
}

// Wait returns the line once it is written, from another goroutine.
func TestBuffer_WaitReturnsTheLineOnceWritten(t *testing.T) {
	log, logs := testlog.New(t, slog.LevelWarn)
	go func() {
		log.Warn("unrelated")
		log.Error("sink refused", "sink", "nats", "err", "authorization violation")
	}()
	line := logs.Wait(t, time.Second, "level=ERROR", "authorization violation")
	if want := `msg="sink refused" sink=nats err="authorization violation"`; !strings.Contains(line, want) {
		t.Errorf("Wait = %q, want the line with %s", line, want)
	}
}

// A JSON log's records are read back by message, with their attributes.
func TestBuffer_RecordsOfAJSONLog(t *testing.T) {
	log, logs := testlog.NewJSON(t, slog.LevelInfo)
	log.Info("delivery failed; retrying", "num_messages", 5)
	log.Info("delivery failed; retrying", "num_messages", 2)
	log.Info("other", "num_messages", 1)
	recs := logs.Records("delivery failed; retrying")
	if len(recs) != 2 || recs[0]["num_messages"] != 5.0 || recs[1]["num_messages"] != 2.0 {
		t.Errorf("records %v, want the two retry records with their counts", recs)
	}
}
