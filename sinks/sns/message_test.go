package sns

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

// These tests hold the mapping to SNS's documented rules, which the
// emulator (fauxqs) does not enforce for SNS: at most 10 message attributes;
// attribute names of A-Z a-z 0-9 _ - . up to 256 characters, not starting
// or ending with a period, without "..", not starting with AWS. or
// Amazon.; no empty values; bodies and values of XML characters only.

func msg(key string, headers map[string]string, payload []byte) *sinks.Message {
	return &sinks.Message{Message: outbox.Message{Topic: "orders.created", Key: key, IdempotencyKey: "id-1", Headers: headers, Payload: payload}}
}

func testSink(cfg Config) *Sink { return &Sink{cfg: cfg} }

func TestBuild_AttributesWithinSNSRules(t *testing.T) {
	t.Parallel()
	h := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-empty": "", "AWS.Trace": "x", "bad..name": "v", "Idempotency-Key": "forged", "OUTBOX_TOPIC": "forged"}
	for i := range 20 {
		h[fmt.Sprintf("x-h%02d", i)] = "v"
	}
	e, err := testSink(Config{}).build(msg("", h, []byte("{}")), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.attrs) != MaxAttributes {
		t.Errorf("%d attributes, want %d", len(e.attrs), MaxAttributes)
	}
	for name, v := range e.attrs {
		if !awsmsg.ValidAttributeName(name) || aws.ToString(v.StringValue) == "" {
			t.Errorf("attribute %q=%q breaks SNS's rules", name, aws.ToString(v.StringValue))
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
		{"\U0001d11e", ""}, // SNS takes U+10000 and above
		{"", EncodingEmpty},
		{"a\x00b", EncodingBase64},
		{"a\x01b", EncodingBase64},
		{"\xff", EncodingBase64},
		{"\uffff", EncodingBase64},
	} {
		e, err := testSink(Config{}).build(msg("", nil, []byte(tt.payload)), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(e.attrs[BodyEncodingAttribute].StringValue); got != tt.encoding {
			t.Errorf("payload %q: encoding %q, want %q", tt.payload, got, tt.encoding)
		}
		if !awsmsg.ValidText([]byte(e.body)) || e.body == "" {
			t.Errorf("payload %q: body %q is not one SNS takes", tt.payload, e.body)
		}
	}
}

func TestBuild_GroupAndDedupIDs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 200)
	for _, tt := range []struct {
		name      string
		cfg       Config
		fifo      bool
		key       string
		wantGroup string
		wantDedup string
	}{
		{"fifo keyed", Config{}, true, "order-42", "order-42", "id-1"},
		{"fifo unkeyed: own group", Config{}, true, "", "id-1", "id-1"},
		{"fifo unkeyed: default group", Config{FIFODefaultGroup: "all"}, true, "", "all", "id-1"},
		{"fifo long key hashed", Config{}, true, long, "sha256:", "id-1"},
		{"standard: no group", Config{}, false, "order-42", "", ""},
	} {
		e, err := testSink(tt.cfg).build(msg(tt.key, nil, []byte("x")), tt.fifo)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(e.group, tt.wantGroup) || (tt.wantGroup == "" && e.group != "") || e.dedup != tt.wantDedup {
			t.Errorf("%s: group %q dedup %q, want %q, %q", tt.name, e.group, e.dedup, tt.wantGroup, tt.wantDedup)
		}
	}
}

// TestBuild_OverMaxMessageSizeIsPermanent: SNS counts the body and the
// attributes against 256 KiB (fauxqs counts the body only).
func TestBuild_OverMaxMessageSizeIsPermanent(t *testing.T) {
	t.Parallel()
	if _, err := testSink(Config{}).build(msg("", nil, []byte(strings.Repeat("x", MaxMessageSize-100))), false); err != nil {
		t.Fatalf("a message within the limit: %v", err)
	}
	_, err := testSink(Config{}).build(msg("", map[string]string{"x-big": strings.Repeat("h", 200)}, []byte(strings.Repeat("x", MaxMessageSize-100))), false)
	if !sinks.IsPermanent(err) || !strings.Contains(err.Error(), "SNS's message size") {
		t.Errorf("got %v, want a permanent limit error", err)
	}
}

func TestTopicName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ prefix, topic, want string }{
		{"events-", "orders.created", "events-orders-created"},
		{"", "orders.fifo", "orders.fifo"},
		{"events-", "billing.orders.fifo", "events-billing-orders.fifo"},
		{"", "a/b", ""},
		{"", "a:b", ""},
		{"", "", ""},
		{"", ".fifo", ""},
		{"", strings.Repeat("q", 257), ""},
		{"", strings.Repeat("q", 251) + ".fifo", strings.Repeat("q", 251) + ".fifo"},
	} {
		got, err := TopicName(tt.prefix, tt.topic)
		if got != tt.want || (tt.want == "") != (err != nil) {
			t.Errorf("TopicName(%q, %q) = %q, %v; want %q", tt.prefix, tt.topic, got, err, tt.want)
		}
	}
}

func TestParseTopicARN(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		raw  string
		want TopicARN
		ok   bool
	}{
		{"arn:aws:sns:eu-west-1:123456789012:orders.fifo", TopicARN{"aws", "eu-west-1", "123456789012", "orders.fifo"}, true},
		{"arn:aws-cn:sns:cn-north-1:123456789012:", TopicARN{"aws-cn", "cn-north-1", "123456789012", ""}, true},
		{"arn:aws:sqs:eu-west-1:123456789012:orders", TopicARN{}, false},
		{"arn:aws:sns:eu-west-1:123456789012", TopicARN{}, false},
		{"arn:aws:sns::123456789012:orders", TopicARN{}, false},
		{"arn:aws:sns:eu-west-1::orders", TopicARN{}, false},
		{"arn:aws:sns:eu-west-1:123456789012:orders.created", TopicARN{}, false},
		{"https://sns.eu-west-1.amazonaws.com/", TopicARN{}, false},
	} {
		got, err := ParseTopicARN(tt.raw)
		if got != tt.want || tt.ok != (err == nil) {
			t.Errorf("ParseTopicARN(%q) = %+v, %v", tt.raw, got, err)
		}
	}
	if got := (TopicARN{"aws", "eu-west-1", "123456789012", ""}).With("orders"); got != "arn:aws:sns:eu-west-1:123456789012:orders" {
		t.Errorf("With = %q", got)
	}
}

func TestEntryErrorClasses(t *testing.T) {
	t.Parallel()
	_ = entryErrorCases
	for _, c := range entryErrorCases {
		err := entryError("t", c.entry)
		_, retryAfter := sinks.RetryDelay(err)
		if sinks.IsPermanent(err) != c.permanent || retryAfter != c.retryAfter {
			t.Errorf("%s: %v: permanent %v, retry-after %v", aws.ToString(c.entry.Code), err, sinks.IsPermanent(err), retryAfter)
		}
	}
}
