package sinktest

import (
	"bytes"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// FuzzHostile is the hostile-row suite as a fuzz target: each input is an
// ordinary message with its parts replaced (fuzzInput), delivered between
// two ordinary messages to one sink h makes for the whole target, and
// checked for the invariant RunHostile states. A destination that is a
// Purger is purged before each input.
//
// The seed corpus is every row of HostileRows, so that plain go test runs
// them all through the fuzz target's path; go test -fuzz then mutates
// them. Inputs that failed are kept in the calling package's
// testdata/fuzz/<target> and run by plain go test too.
func FuzzHostile(f *testing.F, h Harness) {
	f.Helper()
	// The middle one of three, as checkHostile changes; a fixed payload
	// keeps the seeds the same from run to run.
	ref := Messages(f, 3)[1]
	ref.Payload = []byte(`{"n": 1}`)
	for _, row := range HostileRows() {
		in, ok := seedOf(row, ref)
		if !ok {
			f.Fatalf("hostile row %s is not expressed by the fuzz target's arguments", row.Name)
		}
		f.Add(in.TopicSuffix, in.Payload, in.Key, in.HeaderName, in.HeaderValue, in.HeaderCount, in.IdempotencyKeySuffix)
	}
	// One sink and destination for every input: servers are too slow to
	// start once per input.
	sink, dest := h.New(f)
	f.Fuzz(func(t *testing.T, topicSuffix string, payload []byte, key, headerName, headerValue string, headerCount uint16, idempotencyKeySuffix string) {
		in := fuzzInput{
			TopicSuffix: topicSuffix, Payload: payload, Key: key,
			HeaderName: headerName, HeaderValue: headerValue, HeaderCount: headerCount,
			IdempotencyKeySuffix: idempotencyKeySuffix,
		}
		if p, ok := dest.(Purger); ok {
			p.Purge(t)
		}
		checkHostile(t, h, sink, dest, in.set)
	})
}

// fuzzInput is a hostile row as FuzzHostile's arguments.
type fuzzInput struct {
	// TopicSuffix follows Topic in the topic.
	TopicSuffix string
	// Payload replaces the payload.
	Payload []byte
	// Key replaces the key.
	Key string
	// HeaderName and HeaderValue are the headers: HeaderCount of them, all
	// with the value HeaderValue; one is named HeaderName, more are named
	// HeaderName followed by 0, 1, 2…; none when HeaderCount is 0.
	HeaderName, HeaderValue string
	HeaderCount             uint16
	// IdempotencyKeySuffix follows the ordinary message's key.
	IdempotencyKeySuffix string
}

// set changes an ordinary message into the input's.
func (in fuzzInput) set(m *sinks.Message) {
	m.Topic = Topic + in.TopicSuffix
	m.Payload = in.Payload
	m.Key = in.Key
	m.IdempotencyKey += in.IdempotencyKeySuffix
	m.Headers = nil
	switch n := int(in.HeaderCount); n {
	case 0:
	case 1:
		m.Headers = map[string]string{in.HeaderName: in.HeaderValue}
	default:
		m.Headers = make(map[string]string, n)
		for i := range n {
			m.Headers[in.HeaderName+strconv.Itoa(i)] = in.HeaderValue
		}
	}
}

// seedOf returns row as fuzz arguments, read from row applied to ref (an
// ordinary message with a key as long as Messages gives), and whether the
// arguments give the row's message exactly.
func seedOf(row Hostile, ref sinks.Message) (fuzzInput, bool) {
	want := ref
	row.Set(&want)
	in := fuzzInput{
		TopicSuffix:          strings.TrimPrefix(want.Topic, Topic),
		Payload:              want.Payload,
		Key:                  want.Key,
		IdempotencyKeySuffix: strings.TrimPrefix(want.IdempotencyKey, ref.IdempotencyKey),
		HeaderCount:          uint16(min(len(want.Headers), 1<<16-1)),
	}
	for name, value := range want.Headers {
		in.HeaderName, in.HeaderValue = name, value
		if len(want.Headers) > 1 {
			in.HeaderName = strings.TrimRight(name, "0123456789")
		}
		break
	}
	got := ref
	in.set(&got)
	same := got.Topic == want.Topic && bytes.Equal(got.Payload, want.Payload) && got.Key == want.Key &&
		got.IdempotencyKey == want.IdempotencyKey && maps.Equal(got.Headers, want.Headers)
	return in, same
}
