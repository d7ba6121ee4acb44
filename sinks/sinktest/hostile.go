package sinktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// Hostile is one generated hostile row: an ordinary message with one part
// set on an edge of what a producer can write (empty, at a limit, one
// over, far over; NUL, invalid UTF-8, control, bidi and Unicode whitespace
// characters; reserved header names in any case; many and huge headers).
type Hostile struct {
	// Name says which part and which edge, for the subtest's name.
	Name string
	// Part is the part changed: "payload", "topic", "key", "headers" or
	// "idempotency_key".
	Part string
	// Set changes an ordinary message into the hostile one.
	Set func(m *sinks.Message)
}

// HostileRows returns the hostile rows the suite sends, generated over the
// edges of every part a producer writes. Each topic keeps Topic as its
// start, so that a destination capturing Topic's subtree sees it.
//
// Most are refused by the insert guard (outbox/limits.go) before they
// reach a relay; a sink sees them all the same from rows written before
// the guard or with triggers off, and must survive them.
func HostileRows() []Hostile {
	var rows []Hostile
	add := func(part, name string, set func(m *sinks.Message)) {
		rows = append(rows, Hostile{Name: part + "/" + name, Part: part, Set: set})
	}
	for _, e := range edgeStrings {
		name, v := e.name, e.value
		add("topic", name, func(m *sinks.Message) { m.Topic = Topic + "." + v })
		add("key", name, func(m *sinks.Message) { m.Key = v })
		add("idempotency_key", name, func(m *sinks.Message) { m.IdempotencyKey += "-" + v })
		add("headers", "value/"+name, func(m *sinks.Message) { m.Headers = map[string]string{"X-Hostile": v} })
		add("headers", "name/"+name, func(m *sinks.Message) { m.Headers = map[string]string{"X-" + v: "v"} })
		add("payload", name, func(m *sinks.Message) { m.Payload = []byte(v) })
	}
	for _, n := range []int{outbox.TopicBytesMax, outbox.TopicBytesMax + 1, 1024, 4100, 64 << 10} {
		add("topic", fmt.Sprintf("%d_bytes", n), func(m *sinks.Message) { m.Topic = padded(Topic+".", n) })
	}
	for _, n := range []int{outbox.KeyBytesMax, outbox.KeyBytesMax + 1, 64 << 10} {
		add("key", fmt.Sprintf("%d_bytes", n), func(m *sinks.Message) { m.Key = padded("k", n) })
	}
	for _, n := range []int{outbox.IdempotencyKeyBytesMax, outbox.IdempotencyKeyBytesMax + 1, 64 << 10} {
		add("idempotency_key", fmt.Sprintf("%d_bytes", n), func(m *sinks.Message) { m.IdempotencyKey = padded(m.IdempotencyKey+"-", n) })
	}
	for _, n := range []int{0, 1 << 20, 4 << 20} {
		add("payload", fmt.Sprintf("%d_bytes", n), func(m *sinks.Message) { m.Payload = bytes.Repeat([]byte{0, 0xff, 'p'}, n/3) })
	}
	for _, name := range reservedHeaderNames {
		for _, spelled := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
			add("headers", "reserved/"+spelled, func(m *sinks.Message) { m.Headers = map[string]string{spelled: "forged"} })
		}
	}
	add("headers", "budget_exactly", func(m *sinks.Message) {
		m.Headers = map[string]string{"X-Big": strings.Repeat("h", sinks.HeaderBytesMax-len("X-Big"))}
	})
	add("headers", "budget_plus_one", func(m *sinks.Message) {
		m.Headers = map[string]string{"X-Big": strings.Repeat("h", sinks.HeaderBytesMax-len("X-Big")+1)}
	})
	add("headers", "one_mebibyte", func(m *sinks.Message) { m.Headers = map[string]string{"X-Big": strings.Repeat("h", 1<<20)} })
	add("headers", "many", func(m *sinks.Message) {
		m.Headers = map[string]string{}
		for i := range 1000 {
			m.Headers[fmt.Sprintf("X-H%d", i)] = "v"
		}
	})
	add("headers", "many_over_budget", func(m *sinks.Message) {
		m.Headers = map[string]string{}
		for i := range 4000 {
			m.Headers[fmt.Sprintf("X-H%d", i)] = "v"
		}
	})
	return rows
}

// edgeStrings are the characters a producer may put in any text: each
// value is short, so that only its characters are on an edge.
var edgeStrings = []struct{ name, value string }{
	{"empty", ""},
	{"nul", "a\x00b"},
	{"crlf", "a\r\nX-Injected: 1"},
	{"lf", "a\nb"},
	{"tab", "a\tb"},
	{"space", "a b"},
	{"outer_spaces", " a "},
	{"del", "a\x7fb"},
	{"c1_control", "a\u0085b"},
	{"invalid_utf8", "a\xff\xfeb"},
	{"bidi_override", "a\u202eb"},
	{"nbsp", "a\u00a0b"},
	{"ideographic_space", "a\u3000b"},
	{"line_separator", "a\u2028b"},
	{"wildcards", "*.>.#"},
	{"control_plane", "$JS.API.STREAM.DELETE.X"},
	{"dots", ".."},
	{"slash", "a/b"},
	{"colon", "a:b"},
	{"four_byte", "\U0001d11e"},
	{"quote", `a"b`},
	{"backslash", `a\b`},
	{"json_breakout", `a\"},"x":{"b`},
	{"markup", "<a href='x'>&amp;</a>"},
}

// reservedHeaderNames are headers that steer a broker, a proxy or a
// receiver, or carry the idempotency key: a row may not set them, or
// setting them must change nothing.
var reservedHeaderNames = []string{
	"Nats-Msg-Id", "Nats-Expected-Stream", "Nats-Rollup", "Nats-TTL",
	"Idempotency-Key", "Webhook-Id", "Webhook-Signature", "Webhook-Timestamp",
	"Content-Length", "Transfer-Encoding", "Host", "Connection", "Upgrade", "Te", "Trailer",
	"Authorization", "Cookie", "X-Forwarded-For", "X-Original-URL", "X-Rewrite-URL",
	"True-Client-IP", "CF-Connecting-IP", "X-Client-IP", "X-Original-Host", "Via", "Max-Forwards", "Range",
	"Message-Id", "Correlation-Id",
}

// padded returns prefix followed by 'x's up to n bytes.
func padded(prefix string, n int) string {
	if n <= len(prefix) {
		return prefix[:n]
	}
	return prefix + strings.Repeat("x", n-len(prefix))
}

// RunHostile runs the hostile-row suite against one sink h makes: each
// generated row (HostileRows) is delivered in one batch between two
// ordinary messages, and checkHostile checks the invariant for it:
//
//   - the hostile row is delivered byte for byte (payload and idempotency
//     key as sent: no header a row sets changes the key), or refused as a
//     permanent failure and absent from the destination; a transient
//     failure would have the relay retry, for ever, a row that can never
//     go;
//   - both ordinary messages are delivered and arrive;
//   - the sink stays available (a broker connection is not lost, or comes
//     back within a bounded reconnect), and delivers the next message.
//
// A topic only the sink's own destination captures (Features.EveryTopic
// unset) is checked for the last two only: the sink may not be able to
// tell a topic nobody routes from one it cannot send.
//
// FuzzHostile checks the same invariant for generated inputs, seeded with
// these rows.
func RunHostile(t *testing.T, h Harness) {
	t.Helper()
	sink, dest := h.New(t)
	for _, row := range HostileRows() {
		t.Run(row.Name, func(t *testing.T) {
			checkHostile(t, h, sink, dest, row.Set)
		})
	}
}

// checkHostile delivers an ordinary message changed by set between two
// ordinary ones, in one batch, and checks the invariant RunHostile states.
// The hostile topic is checked when it is Topic or the destination sees
// every topic (Features.EveryTopic).
func checkHostile(t *testing.T, h Harness, sink sinks.Sink, dest Destination, set func(m *sinks.Message)) {
	t.Helper()
	msgs := Messages(t, 3)
	set(&msgs[1])
	hostile := msgs[1]
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	errs := deliver(t, sink, ctx, msgs)
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Errorf("an ordinary message beside the hostile row failed: %v", errs[i])
		}
	}
	ordinary := []sinks.Message{msgs[0], msgs[2]}
	checked := hostile.Topic == Topic || h.Features.EveryTopic
	t.Logf("outcome: %v", errs[1])
	switch err := errs[1]; {
	case err == nil && checked:
		got := waitReceived(t, dest, []sinks.Message{msgs[0], hostile, msgs[2]})[hostile.IdempotencyKey]
		switch {
		case len(got) != 1:
			t.Errorf("the hostile row was reported delivered but arrived as %d messages", len(got))
		case got[0].Topic != hostile.Topic:
			t.Errorf("the hostile row was reported delivered but arrived with topic %s, sent %s",
				preview([]byte(got[0].Topic)), preview([]byte(hostile.Topic)))
		case !bytes.Equal(got[0].Payload, hostile.Payload):
			t.Errorf("the hostile row was reported delivered but arrived with %d bytes %s, sent %d bytes %s",
				len(got[0].Payload), preview(got[0].Payload), len(hostile.Payload), preview(hostile.Payload))
		}
	case err == nil:
		waitReceived(t, dest, ordinary)
	case sinks.IsPermanent(err):
		waitReceived(t, dest, ordinary)
		for _, r := range dest.Received(t) {
			if r.IdempotencyKey == hostile.IdempotencyKey {
				t.Errorf("the hostile row was refused as permanent (%v) but arrived", err)
			}
		}
	case checked:
		t.Errorf("the hostile row failed as transient, which the relay retries: %v", clip(err))
	default:
		waitReceived(t, dest, ordinary)
	}
	checkStillDelivers(t, sink, dest)
}

// checkStillDelivers waits for sink to be available and delivers one more
// ordinary message.
func checkStillDelivers(t *testing.T, sink sinks.Sink, dest Destination) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	if a, ok := sink.(sinks.Availability); ok {
		for err := a.Available(); err != nil; err = a.Available() {
			if time.Now().After(deadline) {
				t.Fatalf("the sink is still unavailable %s after the hostile row: %v", waitTimeout, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	next := Messages(t, 1)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		err := deliver(t, sink, ctx, next)[0]
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, sinks.ErrNotAttempted) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		t.Fatalf("the sink cannot deliver after the hostile row: %v", clip(err))
	}
	waitReceived(t, dest, next)
}

// clip shortens an error for a failure message: some quote a whole row.
func clip(err error) string {
	s := err.Error()
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
