package sns_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	snssink "github.com/outbox-relay/outbox-relay/sinks/sns"
)

// harness publishes every row to one topic (SNS_TOPIC_ARN), standard or
// FIFO, and reads what arrived from the SQS queue subscribed to it with
// raw message delivery (a FIFO queue to the FIFO topic). What fauxqs
// cannot show (the five-minute dedup window, throttling, the attribute,
// size and id rules) is tested against SNS's documented rules in
// message_test.go and sinks/internal/awsids.
func harness(fifo bool) sinktest.Harness {
	return sinktest.Harness{
		New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
			srv := sqstest.Start(t)
			name := "sinktest"
			if fifo {
				name += ".fifo"
			}
			arn, u := srv.CreateTopic(t, name)
			return newSink(t, srv, arn, nil), &destination{srv: srv, url: u}
		},
		// An empty topic cannot travel in an attribute.
		Reject: func(m *sinks.Message) { m.Topic = "" },
		// A FIFO topic drops a copy with a MessageDeduplicationId it has
		// had within five minutes (fauxqs: its FIFO queue does); a
		// standard topic keeps both.
		Features: sinktest.Features{Headers: true, DedupsByKey: fifo, Outage: true, EveryTopic: true},
	}
}

func TestSink_ConformanceStandard(t *testing.T) { sinktest.Run(t, harness(false)) }
func TestSink_ConformanceFIFO(t *testing.T)     { sinktest.Run(t, harness(true)) }

func TestSink_HostileRowsStandard(t *testing.T) {
	t.Parallel()
	sinktest.RunHostile(t, harness(false))
}

func TestSink_HostileRowsFIFO(t *testing.T) {
	t.Parallel()
	sinktest.RunHostile(t, harness(true))
}

func FuzzHostileRows(f *testing.F) { sinktest.FuzzHostile(f, harness(true)) }

// destination is the queue subscribed to the topic, as the suites see it.
type destination struct {
	srv *sqstest.Server
	url string
}

func (d *destination) Received(t testing.TB) []sinktest.Received {
	var out []sinktest.Received
	for _, m := range d.srv.Received(t, d.url) {
		out = append(out, received(t, m))
	}
	return out
}

func (d *destination) Break(testing.TB)   { d.srv.Stop() }
func (d *destination) Purge(t testing.TB) { d.srv.Purge(t, d.url) }

// received turns an SQS message, published raw through SNS, back into
// the row it carries, as a consumer would: the body decoded as outbox_body_encoding says, the
// attributes and the folded headers as headers.
func received(t testing.TB, m types.Message) sinktest.Received {
	t.Helper()
	attr := func(name string) string {
		if v, ok := m.MessageAttributes[name]; ok {
			return aws.ToString(v.StringValue)
		}
		return ""
	}
	body := []byte(aws.ToString(m.Body))
	switch attr(snssink.BodyEncodingAttribute) {
	case snssink.EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(string(body))
		if err != nil {
			t.Fatalf("body marked base64 is not: %v", err)
		}
		body = b
	case snssink.EncodingEmpty:
		body = []byte{}
	}
	h := map[string][]string{}
	for k, v := range m.MessageAttributes {
		switch k {
		case snssink.IdempotencyKeyAttribute, snssink.TopicAttribute, snssink.BodyEncodingAttribute:
		case snssink.HeadersAttribute:
			var folded map[string]string
			if err := json.Unmarshal([]byte(aws.ToString(v.StringValue)), &folded); err != nil {
				t.Fatalf("%s is not a JSON object: %v", k, err)
			}
			for fk, fv := range folded {
				h[fk] = append(h[fk], fv)
			}
		default:
			h[k] = append(h[k], aws.ToString(v.StringValue))
		}
	}
	return sinktest.Received{Topic: attr(snssink.TopicAttribute), Payload: body, Headers: h, IdempotencyKey: attr(snssink.IdempotencyKeyAttribute)}
}

// newSink returns a sink for topic ARN arn (or the prefix form) of srv,
// available, closed at cleanup.
func newSink(t testing.TB, srv *sqstest.Server, arn string, configure func(*snssink.Config)) *snssink.Sink {
	t.Helper()
	cfg := snssink.Config{
		TopicARN:    arn,
		Region:      sqstest.Region,
		Endpoint:    srv.Endpoint(),
		Timeout:     5 * time.Second,
		Credentials: sqstest.Credentials,
		Logger:      testLogger(t),
	}
	if configure != nil {
		configure(&cfg)
	}
	s, err := snssink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	waitfor.Condition(t, 15*time.Second, "the sink to reach SNS", func() bool { return s.Available() == nil })
	return s
}

func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// deliver delivers msgs within 20s, one outcome per message.
func deliver(t *testing.T, s sinks.Sink, msgs []sinks.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := s.Deliver(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(errs), len(msgs))
	}
	return errs
}
