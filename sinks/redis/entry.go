package redis

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// The fields of a stream entry.
const (
	// FieldPayload holds the payload, byte for byte.
	FieldPayload = "payload"
	// FieldIdempotencyKey holds the idempotency key: consumers dedupe by it.
	FieldIdempotencyKey = "idempotency_key"
	// FieldTopic holds the row's topic (without the stream prefix).
	FieldTopic = "topic"
	// FieldKey holds the row's ordering key; absent when it has none.
	FieldKey = "key"
	// HeaderFieldPrefix starts the field of each row header:
	// header:traceparent. Headers cannot clash with the fields above.
	HeaderFieldPrefix = "header:"
)

// Bounds of stream names. Redis takes keys of up to 512 MB; the sink takes
// names that an operator can read and type.
const (
	// StreamNameBytesMax bounds a stream's name, prefix included.
	StreamNameBytesMax = 1024
	// StreamPrefixBytesMax bounds Config.StreamPrefix.
	StreamPrefixBytesMax = 256
)

// ValidateStreamName reports whether name may name a stream: 1 to
// StreamNameBytesMax bytes of printable UTF-8 (letters, marks, digits,
// punctuation, symbols and the ASCII space: no control character, no
// other kind of space, no bidi or other format character).
func ValidateStreamName(name string) error {
	switch {
	case name == "":
		return errors.New("invalid Redis stream name: empty")
	case len(name) > StreamNameBytesMax:
		return fmt.Errorf("invalid Redis stream name %q…: %d bytes, more than the relay's limit of %d", clip(name), len(name), StreamNameBytesMax)
	}
	return printable(name)
}

// ValidateStreamPrefix reports whether prefix can start stream names:
// empty, or at most StreamPrefixBytesMax bytes of printable UTF-8.
func ValidateStreamPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > StreamPrefixBytesMax {
		return fmt.Errorf("%d bytes, more than %d", len(prefix), StreamPrefixBytesMax)
	}
	return printable(prefix)
}

// printable refuses a name that holds invalid UTF-8 or a character that is
// not printable.
func printable(name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("invalid Redis stream name %q: not UTF-8", clip(name))
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("invalid Redis stream name %q: it holds %U, which is not printable (control, format and space characters other than the ASCII space are refused)", clip(name), r)
		}
	}
	return nil
}

// entry builds the XADD of m, refusing what Redis can never take or the
// sink will not send, as permanent failures.
func (s *Sink) entry(m *sinks.Message) (*goredis.XAddArgs, error) {
	stream := s.cfg.StreamPrefix + m.Topic
	if err := ValidateStreamName(stream); err != nil {
		return nil, sinks.Permanent(err)
	}
	if err := sinks.CheckMessage(m); err != nil {
		return nil, err
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	n := 2 + 2*len(m.Headers)
	if m.Key != "" {
		n++
	}
	values := make([]any, 0, 2*(n+1))
	size := len(FieldPayload) + len(payload) + len(FieldIdempotencyKey) + len(m.IdempotencyKey) + len(FieldTopic) + len(m.Topic)
	values = append(values, FieldPayload, payload, FieldIdempotencyKey, m.IdempotencyKey, FieldTopic, m.Topic)
	if m.Key != "" {
		values = append(values, FieldKey, m.Key)
		size += len(FieldKey) + len(m.Key)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		values = append(values, HeaderFieldPrefix+k, m.Headers[k])
		size += len(HeaderFieldPrefix) + len(k) + len(m.Headers[k])
	}
	if size > s.cfg.MaxMessageBytes {
		return nil, sinks.Permanent(&sinks.LimitError{What: "stream entry", Size: int64(size), Limit: "REDIS_MAX_MESSAGE_BYTES", Max: int64(s.cfg.MaxMessageBytes)})
	}
	args := &goredis.XAddArgs{Stream: stream, ID: "*", Values: values}
	if s.cfg.MaxLen > 0 {
		args.MaxLen, args.Approx = s.cfg.MaxLen, true
	}
	return args, nil
}

// clip returns the start of s, for an error message.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64]
}
