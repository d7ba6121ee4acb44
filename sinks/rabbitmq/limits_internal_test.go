package rabbitmq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestSink_ContentHeaderOverTheFrameIsRefusedBeforePublishing asks the
// broker for its smallest frame (4 KiB) and sends a message whose content
// header fills it exactly, one a byte larger and a normal one: the first and
// the last arrive, the second is refused before publishing (the broker would
// close the connection over it, 501 FRAME_ERROR), and the connection stays
// up. The exact fit checks contentHeaderFrameSize against the broker.
func TestSink_ContentHeaderOverTheFrameIsRefusedBeforePublishing(t *testing.T) {
	t.Parallel()
	const frame = 4096
	v := rabbitmqtest.New(t)
	v.BindQueue(t, "events", ExchangeDefault, sinktest.Topic, nil)
	s, err := New(Config{URL: v.URL, ConfirmTimeout: 5 * time.Second, frameSize: frame})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })
	if got := s.live().conn.frameMax; got != frame {
		t.Fatalf("negotiated frame of %d bytes, want %d", got, frame)
	}

	msgs := sinktest.Messages(t, 3)
	for _, i := range []int{0, 1} {
		msgs[i].Headers = map[string]string{"x-pad": ""}
		p, err := s.prepare(&msgs[i], &connection{})
		if err != nil {
			t.Fatal(err)
		}
		msgs[i].Headers["x-pad"] = strings.Repeat("p", frame-contentHeaderFrameSize(&p.msg)+i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	errs := s.Deliver(ctx, msgs)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the message that fits the frame exactly: %v; the normal one: %v", errs[0], errs[2])
	}
	var limit *sinks.LimitError
	if !sinks.IsPermanent(errs[1]) || !errors.As(errs[1], &limit) || limit.Size != frame+1 || limit.Max != frame || !strings.Contains(errs[1].Error(), "frame_max") {
		t.Fatalf("a content header a byte over the frame: %v, want a permanent *LimitError of %d bytes over frame_max %d", errs[1], frame+1, frame)
	}
	if got := v.WaitTake(t, "events", 2, 15*time.Second); len(got) != 2 {
		t.Errorf("the queue holds %d messages, want 2", len(got))
	}
	if s.Available() != nil {
		t.Errorf("the sink is unavailable after the refusal: %v", s.Available())
	}
}

func TestDefaultMaxMessageSize(t *testing.T) {
	t.Parallel()
	for version, want := range map[string]int64{
		"3.10.8": 128 << 20, "3.13.7": 128 << 20, "4.0.5": 16 << 20, "4.1.0": 16 << 20, "": 128 << 20, "garbage": 128 << 20,
	} {
		if got := defaultMaxMessageSize(version); got != want {
			t.Errorf("version %q: %d, want %d", version, got, want)
		}
	}
}
