package sinktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// Topic is the topic of every message the suite sends. Harnesses route it
// (a stream capturing it, a subscription).
const Topic = "sinktest.orders.created"

// waitTimeout bounds every wait of the suite for the destination to show a
// message, and every Deliver call that should return promptly.
const waitTimeout = 15 * time.Second

// Run runs the conformance suite against the sinks h makes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, h Harness)
		// needs, when set, says whether the destination has what the
		// test checks; a test it lacks is not run.
		needs func(Features) bool
	}{
		{"PayloadByteExact", testPayloadByteExact, nil},
		{"HeadersPassThrough", testHeadersPassThrough, func(f Features) bool { return f.Headers }},
		{"IdempotencyKeyStable", testIdempotencyKeyStable, nil},
		{"BatchOutcomesInOrder", testBatchOutcomesInOrder, nil},
		{"ContextAlreadyCancelled", testContextAlreadyCancelled, nil},
		{"DeadlinePassed", testDeadlinePassed, nil},
		{"NoDeadline", testNoDeadline, nil},
		{"ConcurrentDeliver", testConcurrentDeliver, nil},
		{"DestinationDown", testDestinationDown, func(f Features) bool { return f.Outage }},
	}
	for _, tt := range tests {
		if tt.needs != nil && !tt.needs(h.Features) {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, h)
		})
	}
}

func testPayloadByteExact(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	payloads := [][]byte{
		[]byte(`{"order_id": 42, "note": "naïve café ✓"}`),
		{0x00},
		{0xff},
		{0x00, 0xff, 0x00, '\r', '\n', 0xff},
		all,
		{},
		nil,
		[]byte("not json: {"),
		bytes.Repeat([]byte{0xfe, 0x00, 'x'}, 20000),
	}
	msgs := Messages(t, len(payloads))
	for i := range msgs {
		msgs[i].Payload = payloads[i]
	}
	errs := deliver(t, sink, context.Background(), msgs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("payload %d (%d bytes): %v", i, len(payloads[i]), err)
		}
	}
	got := waitReceived(t, dest, msgs)
	for i := range msgs {
		r := got[msgs[i].IdempotencyKey][0]
		if !bytes.Equal(r.Payload, payloads[i]) {
			t.Errorf("payload %d: received %d bytes %s, sent %d bytes %s",
				i, len(r.Payload), preview(r.Payload), len(payloads[i]), preview(payloads[i]))
		}
		if r.Topic != Topic {
			t.Errorf("payload %d: received topic %q, sent %q", i, r.Topic, Topic)
		}
	}
}

func testHeadersPassThrough(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	headers := map[string]string{
		"traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":   "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
		"content-type": "application/cloudevents+json; charset=utf-8",
		"x-tenant":     "acme",
		"X-Mixed-Case": "Value With  Spaces, and: punctuation;=",
	}
	msgs := Messages(t, 3)
	for i := range msgs {
		msgs[i].Headers = headers
	}
	msgs[2].Headers = nil // no headers at all works too
	errs := deliver(t, sink, context.Background(), msgs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := waitReceived(t, dest, msgs)
	for _, m := range msgs[:2] {
		r := got[m.IdempotencyKey][0]
		for k, v := range headers {
			if vals := headerValues(r.Headers, k); len(vals) != 1 || vals[0] != v {
				t.Errorf("header %s: received %q, sent %q", k, vals, v)
			}
		}
	}
}

func testIdempotencyKeyStable(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	msgs := Messages(t, 2)
	for range 2 {
		// The same rows again, as after a lost acknowledgement: the
		// second delivery of each is the next attempt.
		errs := deliver(t, sink, context.Background(), msgs)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		for i := range msgs {
			msgs[i].Attempt++
		}
	}
	waitReceived(t, dest, msgs)
	// A destination that keeps duplicates has both copies, one that drops
	// them by key has one.
	want := 2
	if h.Features.DedupsByKey {
		want = 1
	}
	deadline := time.Now().Add(waitTimeout)
	for len(dest.Received(t)) < want*len(msgs) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := len(dest.Received(t)); got != want*len(msgs) {
		t.Errorf("the destination holds %d copies of %d messages each delivered twice, want %d", got, len(msgs), want*len(msgs))
	}
	// Match the copies by payload, which is unique, and check the key each
	// carried: every copy must carry the row's key.
	for _, r := range dest.Received(t) {
		var sent *sinks.Message
		for i := range msgs {
			if bytes.Equal(msgs[i].Payload, r.Payload) {
				sent = &msgs[i]
			}
		}
		if sent == nil {
			t.Errorf("received a message that was not sent: %s", preview(r.Payload))
			continue
		}
		if r.IdempotencyKey != sent.IdempotencyKey {
			t.Errorf("received idempotency key %q, want the row's key %q", r.IdempotencyKey, sent.IdempotencyKey)
		}
	}
}

func testBatchOutcomesInOrder(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	msgs := Messages(t, 200)
	rejected := map[int]bool{}
	if h.Reject != nil {
		for i := 3; i < len(msgs); i += 17 {
			h.Reject(&msgs[i])
			rejected[i] = true
		}
	}
	errs := deliver(t, sink, context.Background(), msgs)
	var delivered []sinks.Message
	for i, err := range errs {
		switch {
		case rejected[i] && !sinks.IsPermanent(err):
			t.Errorf("message %d was made to fail permanently; outcome %v", i, err)
		case !rejected[i] && err != nil:
			t.Errorf("message %d: %v", i, err)
		case err == nil:
			delivered = append(delivered, msgs[i])
		}
	}
	got := waitReceived(t, dest, delivered)
	for i := range rejected {
		if _, ok := got[msgs[i].IdempotencyKey]; ok {
			t.Errorf("message %d was refused but the destination has it", i)
		}
	}
	for _, m := range delivered {
		if r := got[m.IdempotencyKey][0]; !bytes.Equal(r.Payload, m.Payload) {
			t.Errorf("key %s: received payload %s, sent %s", m.IdempotencyKey, preview(r.Payload), preview(m.Payload))
		}
	}
}

func testContextAlreadyCancelled(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	checkEndedContext(t, sink, dest, ctx)
}

func testDeadlinePassed(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	checkEndedContext(t, sink, dest, ctx)
}

// checkEndedContext delivers with a context that has already ended: Deliver
// returns promptly, nothing is permanent (the message is not at fault), and
// what is reported delivered is at the destination.
func checkEndedContext(t *testing.T, sink sinks.Sink, dest Destination, ctx context.Context) {
	t.Helper()
	msgs := Messages(t, 20)
	start := time.Now()
	errs := deliver(t, sink, ctx, msgs)
	if d := time.Since(start); d > waitTimeout {
		t.Errorf("Deliver with an ended context took %s", d)
	}
	var delivered []sinks.Message
	for i, err := range errs {
		if err == nil {
			delivered = append(delivered, msgs[i])
		} else if sinks.IsPermanent(err) {
			t.Errorf("message %d: an ended context made a permanent failure: %v", i, err)
		}
	}
	waitReceived(t, dest, delivered)
}

func testNoDeadline(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	msgs := Messages(t, 5)
	errs := deliver(t, sink, context.Background(), msgs)
	for i, err := range errs {
		if err != nil {
			t.Errorf("message %d, context without deadline: %v", i, err)
		}
	}
	waitReceived(t, dest, msgs)
}

func testConcurrentDeliver(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	const goroutines, perBatch = 8, 25
	msgs := Messages(t, goroutines*perBatch)
	errs := make([][]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			batch := msgs[g*perBatch : (g+1)*perBatch]
			errs[g] = sink.Deliver(ctx, batch)
		})
	}
	wg.Wait()
	for g := range goroutines {
		if len(errs[g]) != perBatch {
			t.Fatalf("goroutine %d: %d outcomes for %d messages", g, len(errs[g]), perBatch)
		}
		for i, err := range errs[g] {
			if err != nil {
				t.Errorf("goroutine %d, message %d: %v", g, i, err)
			}
		}
	}
	got := waitReceived(t, dest, msgs)
	for _, m := range msgs {
		if r := got[m.IdempotencyKey][0]; !bytes.Equal(r.Payload, m.Payload) {
			t.Errorf("key %s: received payload %s, sent %s", m.IdempotencyKey, preview(r.Payload), preview(m.Payload))
		}
	}
}

func testDestinationDown(t *testing.T, h Harness) {
	sink, dest := h.New(t)
	b, ok := dest.(Breaker)
	if !ok {
		t.Fatal("Features.Outage is set but the Destination does not implement Breaker")
	}
	before := Messages(t, 3)
	for i, err := range deliver(t, sink, context.Background(), before) {
		if err != nil {
			t.Fatalf("message %d before the outage: %v", i, err)
		}
	}
	waitReceived(t, dest, before)
	b.Break(t)
	msgs := Messages(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, err := range deliver(t, sink, ctx, msgs) {
		switch {
		case err == nil:
			t.Errorf("message %d reported delivered to a destination that accepts nothing", i)
		case sinks.IsPermanent(err):
			t.Errorf("message %d: an outage made a permanent failure: %v", i, err)
		}
	}
}

// Messages returns n messages for t with unique idempotency keys and
// payloads, topic Topic and attempt 1.
func Messages(t testing.TB, n int) []sinks.Message {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	run := hex.EncodeToString(b[:])
	now := time.Now()
	msgs := make([]sinks.Message, n)
	for i := range msgs {
		key := fmt.Sprintf("sinktest-%s-%d", run, i)
		msgs[i] = sinks.Message{
			Message: outbox.Message{
				Topic:          Topic,
				Payload:        fmt.Appendf(nil, `{"n": %d, "key": %q}`, i, key),
				IdempotencyKey: key,
			},
			ID:        int64(i + 1),
			CreatedAt: now,
			Attempt:   1,
		}
	}
	return msgs
}

// deliver calls Deliver with a copy of msgs, checks that it returned one
// outcome per message and that msgs were not changed.
func deliver(t *testing.T, sink sinks.Sink, ctx context.Context, msgs []sinks.Message) []error {
	t.Helper()
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		// context.Background: the suite still bounds the call.
		done := make(chan struct{})
		defer close(done)
		timer := time.AfterFunc(2*waitTimeout, func() {
			select {
			case <-done:
			default:
				t.Errorf("Deliver without a deadline has not returned after %s", 2*waitTimeout)
			}
		})
		defer timer.Stop()
	}
	sent := make([]sinks.Message, len(msgs))
	copy(sent, msgs)
	errs := sink.Deliver(ctx, sent)
	if len(errs) != len(msgs) {
		t.Fatalf("Deliver returned %d outcomes for %d messages", len(errs), len(msgs))
	}
	for i := range msgs {
		if sent[i].IdempotencyKey != msgs[i].IdempotencyKey || !bytes.Equal(sent[i].Payload, msgs[i].Payload) {
			t.Fatalf("Deliver changed message %d", i)
		}
	}
	return errs
}

// waitReceived waits until the destination has every message of msgs and
// returns what it received by idempotency key.
func waitReceived(t *testing.T, dest Destination, msgs []sinks.Message) map[string][]Received {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := map[string][]Received{}
		for _, r := range dest.Received(t) {
			got[r.IdempotencyKey] = append(got[r.IdempotencyKey], r)
		}
		var missing []string
		for _, m := range msgs {
			if len(got[m.IdempotencyKey]) == 0 {
				missing = append(missing, m.IdempotencyKey)
			}
		}
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages reported delivered are not at the destination after %s (first: %s)",
				len(missing), len(msgs), waitTimeout, missing[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// headerValues returns the values of every header named name, regardless of
// case.
func headerValues(h map[string][]string, name string) []string {
	var vals []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			vals = append(vals, v...)
		}
	}
	return vals
}

// preview shows the start of a payload in test failures.
func preview(b []byte) string {
	if len(b) > 32 {
		return fmt.Sprintf("%q…", b[:32])
	}
	return fmt.Sprintf("%q", b)
}
