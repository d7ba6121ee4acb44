// Package awsmsg maps a row onto the message the SQS and SNS sinks send:
// the body (the payload as text when SQS and SNS take it as it is, base64
// otherwise, a mark when empty), the relay's attributes (idempotency key,
// topic, body encoding) and the row's headers as string attributes within
// the ten a message may carry, the rest folded into one attribute of JSON.
// SNS hands the same attributes to its SQS subscribers (raw message
// delivery), so both sinks' consumers read messages alike. The message
// group and deduplication ids are awsids'.
package awsmsg

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// The message attributes the relay sets on every message; a row header of
// one of these names (in any case) is dropped.
const (
	// IdempotencyKeyAttribute carries the row's idempotency key as it is
	// (on FIFO queues and topics MessageDeduplicationId carries it too,
	// mapped).
	IdempotencyKeyAttribute = "Idempotency-Key"
	// TopicAttribute carries the row's topic.
	TopicAttribute = "outbox_topic"
	// BodyEncodingAttribute is set when the body is not the payload as it
	// is: "base64" (the body is the payload in standard base64) or "empty"
	// (the payload is empty; the body is EmptyBody, as SQS and SNS need
	// one).
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

// MaxAttributes is the most message attributes SQS and SNS take on one
// message.
const MaxAttributes = 10

// maxAttributeNameLen is the longest attribute name they take.
const maxAttributeNameLen = 256

// StringType is the data type of every attribute the sinks set.
const StringType = "String"

// firstHeaders are the row headers that get an attribute of their own
// before any other: what consumers' tracing reads.
var firstHeaders = []string{"traceparent", "tracestate", "baggage"}

// Message is a row as SQS and SNS take it, and its size as they count it
// against their message size: the body's bytes and each attribute's name,
// data type (StringType) and value.
type Message struct {
	Body  string
	Attrs map[string]string
	Size  int
}

// Build maps m onto its message for service (SQS or SNS, named in errors),
// or returns the permanent error of a row the service can never take.
func Build(m *sinks.Message, service string) (*Message, error) {
	if err := sinks.CheckMessage(m); err != nil {
		return nil, err
	}
	if err := AttributeValue(m.Topic, service); err != nil {
		return nil, sinks.Permanent(fmt.Errorf("the topic cannot travel in the %s attribute: %w", TopicAttribute, err))
	}
	msg := &Message{Attrs: map[string]string{}}
	msg.set(IdempotencyKeyAttribute, m.IdempotencyKey)
	msg.set(TopicAttribute, m.Topic)
	switch {
	case len(m.Payload) == 0:
		msg.Body = EmptyBody
		msg.set(BodyEncodingAttribute, EncodingEmpty)
	case ValidText(m.Payload):
		msg.Body = string(m.Payload)
	default:
		msg.Body = base64.StdEncoding.EncodeToString(m.Payload)
		msg.set(BodyEncodingAttribute, EncodingBase64)
	}
	if err := msg.headers(m.Headers, service); err != nil {
		return nil, sinks.Permanent(err)
	}
	msg.Size = len(msg.Body)
	for k, v := range msg.Attrs {
		msg.Size += len(k) + len(StringType) + len(v)
	}
	return msg, nil
}

// set sets the string attribute name to value.
func (m *Message) set(name, value string) {
	m.Attrs[name] = value
}

// Reserved reports whether a row header of this name is dropped: the
// relay sets that attribute itself.
func Reserved(name string) bool {
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
func (m *Message) headers(h map[string]string, service string) error {
	var own, folded []string
	names := slices.Sorted(maps.Keys(h))
	slices.SortStableFunc(names, func(a, b string) int { return rank(a) - rank(b) })
	for _, k := range names {
		if Reserved(k) {
			continue
		}
		if !utf8.ValidString(h[k]) {
			return fmt.Errorf("header %s is not valid UTF-8, and %s attributes are text", Clipped(k), service)
		}
		if ValidAttributeName(k) && AttributeValue(h[k], service) == nil {
			own = append(own, k)
		} else {
			folded = append(folded, k)
		}
	}
	free := MaxAttributes - len(m.Attrs)
	if len(own) > free || len(folded) > 0 {
		free-- // the folded headers' attribute
		if len(own) > free {
			folded = append(folded, own[free:]...)
			own = own[:free]
		}
	}
	for _, k := range own {
		m.set(k, h[k])
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
	m.set(HeadersAttribute, escapeNonXML(string(b)))
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

// ValidText reports whether b is text SQS and SNS take as a body or an
// attribute value as it is: valid UTF-8 of the characters XML allows (#x9, #xA, #xD,
// #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF).
func ValidText(b []byte) bool {
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

// AttributeValue returns why s cannot be a string attribute's value of
// service (SQS or SNS, named in the error), nil when it can.
func AttributeValue(s, service string) error {
	switch {
	case s == "":
		return errors.New(service + " refuses an empty attribute value")
	case !ValidText([]byte(s)):
		return errors.New("it holds invalid UTF-8 or a character " + service + " refuses in text")
	}
	return nil
}

// ValidAttributeName reports whether SQS and SNS (which hands attributes
// to SQS subscribers) take name as a message attribute's name: up to 256 of A-Z a-z 0-9 _ - ., not starting or ending
// with a period, without two periods in a row, not starting with AWS. or
// Amazon. in any case.
func ValidAttributeName(name string) bool {
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
	if ValidText([]byte(s)) {
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

// Clipped returns s quoted, or its first 64 bytes and a mark, for an
// error.
func Clipped(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", strings.ToValidUTF8(s[:64], ""))
}
