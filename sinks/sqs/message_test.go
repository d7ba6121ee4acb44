package sqs

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsmsg"
)

// These tests hold the mapping to SQS's documented rules, which the
// emulator (fauxqs) does not enforce: at most 10 message attributes;
// attribute names of A-Z a-z 0-9 _ - . up to 256 characters, not starting
// or ending with a period, without "..", not starting with AWS. or
// Amazon.; no empty values; bodies and values of XML characters only.

func msg(key string, headers map[string]string, payload []byte) *sinks.Message {
	return &sinks.Message{Message: outbox.Message{Topic: "orders.created", Key: key, IdempotencyKey: "id-1", Headers: headers, Payload: payload}}
}

func testSink(cfg Config) *Sink { return &Sink{cfg: cfg} }

func TestBuild_AttributesWithinSQSRules(t *testing.T) {
	t.Parallel()
	h := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-empty": "", "AWS.Trace": "x", "bad..name": "v", "Idempotency-Key": "forged", "OUTBOX_TOPIC": "forged"}
	for i := range 20 {
		h[fmt.Sprintf("x-h%02d", i)] = "v"
	}
	e, err := testSink(Config{}).build(msg("", h, []byte("{}")), &queue{maxSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.attrs) != MaxAttributes {
		t.Errorf("%d attributes, want %d", len(e.attrs), MaxAttributes)
	}
	for name, v := range e.attrs {
		if !awsmsg.ValidAttributeName(name) || aws.ToString(v.StringValue) == "" {
			t.Errorf("attribute %q=%q breaks SQS's rules", name, aws.ToString(v.StringValue))
		}
	}
	if got := aws.ToString(e.attrs["traceparent"].StringValue); got != h["traceparent"] {
		t.Errorf("traceparent attribute %q, want the row's", got)
	}
	if got := aws.ToString(e.attrs[IdempotencyKeyAttribute].StringValue); got != "id-1" {
		t.Errorf("a row header changed the idempotency key: %q", got)
	}
	var folded map[string]string
	if err := json.Unmarshal([]byte(aws.ToString(e.attrs[HeadersAttribute].StringValue)), &folded); err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if awsmsg.Reserved(k) {
			if _, ok := folded[k]; ok {
				t.Errorf("reserved header %s was carried", k)
			}
			continue
		}
		a, own := e.attrs[k]
		if own && aws.ToString(a.StringValue) != v || !own && folded[k] != v {
			t.Errorf("header %s=%q lost (own %v, folded %q)", k, v, own, folded[k])
		}
	}
}

func TestBuild_Body(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		payload  string
		encoding string
	}{
		{`{"a": "naïve ✓"}`, ""},
		{"\U0001d11e", ""}, // SQS takes U+10000 and above (fauxqs does not)
		{"", EncodingEmpty},
		{"a\x00b", EncodingBase64},
		{"a\x01b", EncodingBase64},
		{"\xff", EncodingBase64},
		{"\uffff", EncodingBase64},
	} {
		e, err := testSink(Config{}).build(msg("", nil, []byte(tt.payload)), &queue{maxSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(e.attrs[BodyEncodingAttribute].StringValue); got != tt.encoding {
			t.Errorf("payload %q: encoding %q, want %q", tt.payload, got, tt.encoding)
		}
		if !awsmsg.ValidText([]byte(e.body)) || e.body == "" {
			t.Errorf("payload %q: body %q is not one SQS takes", tt.payload, e.body)
		}
	}
}

func TestBuild_GroupAndDedupIDs(t *testing.T) {
	t.Parallel()
	fifo := &queue{fifo: true, maxSize: 1 << 20}
	std := &queue{maxSize: 1 << 20}
	long := strings.Repeat("k", 200)
	for _, tt := range []struct {
		name      string
		cfg       Config
		q         *queue
		key       string
		wantGroup string
		wantDedup string
	}{
		{"fifo keyed", Config{}, fifo, "order-42", "order-42", "id-1"},
		{"fifo unkeyed: own group", Config{}, fifo, "", "id-1", "id-1"},
		{"fifo unkeyed: default group", Config{FIFODefaultGroup: "all"}, fifo, "", "all", "id-1"},
		{"fifo long key hashed", Config{}, fifo, long, "sha256:", "id-1"},
		{"standard: no group", Config{}, std, "order-42", "", ""},
		{"fair queue", Config{FairQueues: true}, std, "order-42", "order-42", ""},
		{"fair queue unkeyed", Config{FairQueues: true}, std, "", "", ""},
	} {
		e, err := testSink(tt.cfg).build(msg(tt.key, nil, []byte("x")), tt.q)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(e.group, tt.wantGroup) || (tt.wantGroup == "" && e.group != "") || e.dedup != tt.wantDedup {
			t.Errorf("%s: group %q dedup %q, want %q, %q", tt.name, e.group, e.dedup, tt.wantGroup, tt.wantDedup)
		}
	}
}

func TestBuild_OverMaximumMessageSizeIsPermanent(t *testing.T) {
	t.Parallel()
	_, err := testSink(Config{}).build(msg("", nil, []byte(strings.Repeat("x", 2048))), &queue{maxSize: 1024})
	if !sinks.IsPermanent(err) || !strings.Contains(err.Error(), "MaximumMessageSize") {
		t.Errorf("got %v, want a permanent limit error", err)
	}
}

func TestQueueName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ prefix, topic, want string }{
		{"events-", "orders.created", "events-orders-created"},
		{"", "orders.fifo", "orders.fifo"},
		{"events-", "billing.orders.fifo", "events-billing-orders.fifo"},
		{"", "a/b", ""},
		{"", "", ""},
		{"", ".fifo", ""},
		{"", strings.Repeat("q", 81), ""},
		{"", strings.Repeat("q", 75) + ".fifo", strings.Repeat("q", 75) + ".fifo"},
	} {
		got, err := QueueName(tt.prefix, tt.topic)
		if got != tt.want || (tt.want == "") != (err != nil) {
			t.Errorf("QueueName(%q, %q) = %q, %v; want %q", tt.prefix, tt.topic, got, err, tt.want)
		}
	}
}

func TestEntryErrorClasses(t *testing.T) {
	t.Parallel()
	_ = entryErrorCases
	for _, c := range entryErrorCases {
		err := entryError("q", c.entry)
		_, retryAfter := sinks.RetryDelay(err)
		if sinks.IsPermanent(err) != c.permanent || retryAfter != c.retryAfter {
			t.Errorf("%s: %v: permanent %v, retry-after %v", aws.ToString(c.entry.Code), err, sinks.IsPermanent(err), retryAfter)
		}
	}
}
