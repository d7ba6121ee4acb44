package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
)

func checkStartup(t *testing.T, cfg natssink.Config) []sinks.Problem {
	t.Helper()
	s, err := natssink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	problems, err := s.CheckStartup(ctx)
	if err != nil {
		t.Fatalf("CheckStartup: %v", err)
	}
	return problems
}

func codes(problems []sinks.Problem) []string {
	var out []string
	for _, p := range problems {
		out = append(out, p.Code)
	}
	return out
}

func TestCheckStartup_ReportsMissingStreamsAndShortWindows(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	cfg := natssink.Config{URL: srv.URL(), JetStream: true, SubjectPrefix: "events.", DuplicateWindow: time.Hour}

	if got := codes(checkStartup(t, cfg)); len(got) != 1 || got[0] != natssink.ProblemNoStream {
		t.Errorf("without a stream: problems %v, want [%s]", got, natssink.ProblemNoStream)
	}

	srv.CreateStream(t, "EVENTS", "events.>") // the JetStream default window: 2 minutes
	if got := codes(checkStartup(t, cfg)); len(got) != 1 || got[0] != natssink.ProblemShortDedupWindow {
		t.Errorf("with a 2m window and a lease + backoff of 1h: problems %v, want [%s]", got, natssink.ProblemShortDedupWindow)
	}

	cfg.DuplicateWindow = 90 * time.Second
	if got := checkStartup(t, cfg); len(got) != 0 {
		t.Errorf("with a window covering lease + backoff: problems %v, want none", got)
	}

	cfg.SubjectPrefix = ""
	if got := checkStartup(t, cfg); len(got) != 0 {
		t.Errorf("without a prefix there is nothing to check, but: %v", got)
	}
}

func TestCheckStartup_CreatesTheStreamItIsGiven(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	cfg := natssink.Config{URL: srv.URL(), JetStream: true, SubjectPrefix: "events.", Stream: "EVENTS", DuplicateWindow: 30*time.Second + time.Hour}
	if got := checkStartup(t, cfg); len(got) != 0 {
		t.Errorf("with NATS_STREAM: problems %v, want none (the stream it made covers lease + backoff)", got)
	}
	st, err := srv.JetStream().Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatalf("the stream was not created: %v", err)
	}
	if c := st.CachedInfo().Config; c.Duplicates != cfg.DuplicateWindow || len(c.Subjects) != 1 || c.Subjects[0] != "events.>" {
		t.Errorf("stream config: duplicates %s, subjects %v", c.Duplicates, c.Subjects)
	}
	// An existing stream is left as it is.
	cfg.DuplicateWindow = 3 * time.Hour
	if got := codes(checkStartup(t, cfg)); len(got) != 1 || got[0] != natssink.ProblemShortDedupWindow {
		t.Errorf("problems %v, want the existing stream's short window reported", got)
	}
}
