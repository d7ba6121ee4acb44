package sns

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/internal/awsids"
)

// The message attributes the relay sets on every message; a row header of
// one of these names (in any case) is dropped.
const (
	// IdempotencyKeyAttribute carries the row's idempotency key as it is
	// (on FIFO topics MessageDeduplicationId carries it too, mapped).
	IdempotencyKeyAttribute = "Idempotency-Key"
	// TopicAttribute carries the row's topic.
	TopicAttribute = "outbox_topic"
	// BodyEncodingAttribute is set when the body is not the payload as it
	// is: "base64" (the body is the payload in standard base64) or "empty"
	// (the payload is empty; the body is EmptyBody, as SNS needs one).
	BodyEncodingAttribute = "outbox_body_encoding"
	// HeadersAttribute holds, as one JSON object of names to values, the
	// row headers that are not attributes of their own.
	HeadersAttribute = "outbox_headers"
)

// Values of BodyEncodingAttribute, and the body of an empty payload.
const (
	EncodingBase64 = "base64"
	EncodingEmpty  = "empty"
	EmptyBody      = "-"
)

// MaxAttributes is the most message attributes SNS takes on one message.
const MaxAttributes = 10

// MaxMessageSize is the most bytes SNS takes in one message, its body and
// its attributes' names, types and values, and in one PublishBatch.
const MaxMessageSize = 256 << 10

// maxAttributeNameLen is the longest attribute name SNS takes.
const maxAttributeNameLen = 256

// stringType is the data type of every attribute the sink sets.
const stringType = "String"

// firstHeaders are the row headers that get an attribute of their own
// before any other: what consumers' tracing reads.
var firstHeaders = []string{"traceparent", "tracestate", "baggage"}

// entry is one message ready for PublishBatch, and its size as SNS counts
// it against MaxMessageSize: the body's bytes and each attribute's name,
// data type and value.
type entry struct {
	body  string
	attrs map[string]types.MessageAttributeValue
	group string // MessageGroupId, "" for none
	dedup string // MessageDeduplicationId, "" for none
	size  int
}

// build makes m's entry for a topic (a FIFO topic when fifo), or returns
// the permanent error of a row SNS can never take.
func (s *Sink) build(m *sinks.Message, fifo bool) (*entry, error) {
	if err := sinks.CheckMessage(m); err != nil {
		return nil, err
	}
	if err := attributeValue(m.Topic); err != nil {
		return nil, sinks.Permanent(fmt.Errorf("the topic cannot travel in the %s attribute: %w", TopicAttribute, err))
	}
	e := &entry{attrs: map[string]types.MessageAttributeValue{}}
	e.set(IdempotencyKeyAttribute, m.IdempotencyKey)
	e.set(TopicAttribute, m.Topic)
	switch {
	case len(m.Payload) == 0:
		e.body = EmptyBody
		e.set(BodyEncodingAttribute, EncodingEmpty)
	case validText(m.Payload):
		e.body = string(m.Payload)
	default:
		e.body = base64.StdEncoding.EncodeToString(m.Payload)
		e.set(BodyEncodingAttribute, EncodingBase64)
	}
	if err := e.headers(m.Headers); err != nil {
		return nil, sinks.Permanent(err)
	}
	if fifo {
		e.dedup = awsids.DeduplicationID(m.IdempotencyKey)
		if m.Key != "" {
			e.group = awsids.GroupID(m.Key)
		} else {
			e.group = awsids.GroupID(cmpOr(s.cfg.FIFODefaultGroup, m.IdempotencyKey))
		}
	}
	e.size = len(e.body)
	for k, v := range e.attrs {
		e.size += len(k) + len(*v.DataType) + len(*v.StringValue)
	}
	if e.size > MaxMessageSize {
		return nil, sinks.Permanent(&sinks.LimitError{What: "message (body and attributes)", Size: int64(e.size), Limit: "SNS's message size", Max: MaxMessageSize})
	}
	return e, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// set sets the string attribute name to value.
func (e *entry) set(name, value string) {
	e.attrs[name] = types.MessageAttributeValue{DataType: aws.String(stringType), StringValue: aws.String(value)}
}

// reserved reports whether a row header of this name is dropped: the
// relay sets that attribute itself.
func reserved(name string) bool {
	for _, r := range []string{IdempotencyKeyAttribute, TopicAttribute, BodyEncodingAttribute, HeadersAttribute} {
		if strings.EqualFold(name, r) {
			return true
		}
	}
	return false
}

// headers sets the row's headers as attributes: traceparent, tracestate
// and baggage first, then the others by name, each as an attribute of its
// own while one is left and the header can be one (a valid attribute name,
// a value that is not empty), the rest folded into HeadersAttribute.
func (e *entry) headers(h map[string]string) error {
	var own, folded []string
	names := slices.Sorted(maps.Keys(h))
	slices.SortStableFunc(names, func(a, b string) int { return rank(a) - rank(b) })
	for _, k := range names {
		if reserved(k) {
			continue
		}
		if !utf8.ValidString(h[k]) {
			return fmt.Errorf("header %s is not valid UTF-8, and SNS attributes are text", clipped(k))
		}
		if validAttributeName(k) && attributeValue(h[k]) == nil {
			own = append(own, k)
		} else {
			folded = append(folded, k)
		}
	}
	free := MaxAttributes - len(e.attrs)
	if len(own) > free || len(folded) > 0 {
		free-- // the folded headers' attribute
		if len(own) > free {
			folded = append(folded, own[free:]...)
			own = own[:free]
		}
	}
	for _, k := range own {
		e.set(k, h[k])
	}
	if len(folded) == 0 {
		return nil
	}
	rest := make(map[string]string, len(folded))
	for _, k := range folded {
		rest[k] = h[k]
	}
	b, err := json.Marshal(rest)
	if err != nil {
		return fmt.Errorf("fold headers: %w", err)
	}
	e.set(HeadersAttribute, escapeNonXML(string(b)))
	return nil
}

// rank orders the headers that come first.
func rank(name string) int {
	for i, f := range firstHeaders {
		if strings.EqualFold(name, f) {
			return i - len(firstHeaders)
		}
	}
	return 0
}

// validText reports whether b is text SNS takes as a body or an attribute
// value as it is, and that SQS subscribers take from it: valid UTF-8 of
// the characters XML allows (#x9, #xA, #xD,
// #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF).
func validText(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 || !xmlChar(r) {
			return false
		}
		b = b[n:]
	}
	return true
}

func xmlChar(r rune) bool {
	return r == 0x9 || r == 0xA || r == 0xD ||
		r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF
}

// attributeValue returns why s cannot be a string attribute's value, nil
// when it can.
func attributeValue(s string) error {
	switch {
	case s == "":
		return errors.New("SNS refuses an empty attribute value")
	case !validText([]byte(s)):
		return errors.New("it holds invalid UTF-8 or a character SNS refuses in text")
	}
	return nil
}

// validAttributeName reports whether SNS (and SQS, for raw message
// delivery) takes name as a message attribute's name: up to 256 of A-Z a-z
// 0-9 _ - ., not starting or ending with a period, without two periods in
// a row, not starting with AWS. or Amazon. in any case.
func validAttributeName(name string) bool {
	if name == "" || len(name) > maxAttributeNameLen || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// escapeNonXML writes the characters of JSON text s that XML does not
// allow (U+FFFE, U+FFFF; encoding/json escapes the controls already) as
// \u escapes, which JSON readers decode back.
func escapeNonXML(s string) string {
	if validText([]byte(s)) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if xmlChar(r) {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// clipped returns s, or its first 64 bytes and a mark, for an error.
func clipped(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", strings.ToValidUTF8(s[:64], ""))
}
