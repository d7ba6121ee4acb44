package webhook_test

import (
	"errors"
	"maps"
	"net/url"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

func TestSink_RowHeadersCannotOverrideReserved(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, func(c *webhook.Config) { c.UserAgent = "outbox-relay/test" })
	m := message(t, map[string]string{
		"webhook-signature":   "v1,Zm9yZ2Vk",
		"Webhook-Id":          "forged-id",
		"webhook-timestamp":   "1",
		"idempotency-key":     "forged-key",
		"Host":                "evil.example",
		"User-Agent":          "forged-agent",
		"Content-Length":      "1",
		"Transfer-Encoding":   "chunked",
		"Connection":          "close",
		"Keep-Alive":          "timeout=1",
		"Proxy-Authorization": "Basic Zm9yZ2Vk",
		"proxy-connection":    "close",
		"TE":                  "trailers",
		"Trailer":             "X-Forged",
		"Upgrade":             "websocket",
		"Expect":              "100-continue",
		"Outbox-Topic":        "forged.topic",
		"X-Custom":            "kept",
		"traceparent":         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	})
	if err := deliverOne(t, s, m); err != nil {
		t.Fatal(err) // the endpoint also verified the signature
	}
	r := e.Requests()[0]
	u, _ := url.Parse(e.Server.URL)
	checks := []struct{ name, got, want string }{
		{"Host", r.Host, u.Host},
		{"webhook-id", r.Header.Get("webhook-id"), m.IdempotencyKey},
		{"Idempotency-Key", r.Header.Get("Idempotency-Key"), m.IdempotencyKey},
		{"User-Agent", r.Header.Get("User-Agent"), "outbox-relay/test"},
		{"Outbox-Topic", r.Header.Get("Outbox-Topic"), m.Topic},
		{"Proxy-Authorization", r.Header.Get("Proxy-Authorization"), ""},
		{"Proxy-Connection", r.Header.Get("Proxy-Connection"), ""},
		{"Upgrade", r.Header.Get("Upgrade"), ""},
		{"Trailer", r.Header.Get("Trailer"), ""},
		{"Keep-Alive", r.Header.Get("Keep-Alive"), ""},
		{"Expect", r.Header.Get("Expect"), ""},
		{"X-Custom", r.Header.Get("X-Custom"), "kept"},
		{"traceparent", r.Header.Get("traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: received %q, want %q", c.name, c.got, c.want)
		}
	}
	for _, name := range []string{"webhook-signature", "webhook-id", "webhook-timestamp", "Idempotency-Key", "User-Agent"} {
		if n := len(r.Header.Values(name)); n != 1 {
			t.Errorf("%s sent %d times, want once", name, n)
		}
	}
	if string(r.Body) != string(m.Payload) {
		t.Errorf("body %q, want %q", r.Body, m.Payload)
	}
}

func TestSink_InvalidRowHeaderIsPermanent(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, nil)
	for _, h := range []map[string]string{
		{"bad name": "v"},
		{"": "v"},
		{"x-ok": "line\r\nX-Injected: 1"},
		{"x-ok": "nul\x00"},
	} {
		if err := deliverOne(t, s, message(t, h)); !sinks.IsPermanent(err) {
			t.Errorf("headers %q: %v, want a permanent error", h, err)
		}
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests sent with invalid headers", n)
	}
}

func TestSink_TopicWithOuterWhiteSpaceIsPermanent(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, nil)
	// HTTP trims a header value: Outbox-Topic would name another topic.
	for _, topic := range []string{"orders.created ", " orders.created", "orders.created\t"} {
		m := message(t, nil)
		m.Topic = topic
		if err := deliverOne(t, s, m); !sinks.IsPermanent(err) {
			t.Errorf("topic %q: %v, want a permanent error", topic, err)
		}
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests sent for topics the receiver would not see as sent", n)
	}
}

func TestSink_ContentType(t *testing.T) {
	e := newEndpoint(t, 1)
	s := newSink(t, e, nil)
	tests := []struct {
		payload string
		headers map[string]string
		want    string
	}{
		{`{"order_id": 42}`, nil, "application/json"},
		{" [1, 2, 3]\n", nil, "application/json"},
		{`"a JSON string"`, nil, "application/json"},
		{`42`, nil, "application/json"},
		{`{"truncated": `, nil, "application/octet-stream"},
		{"plain text", nil, "application/octet-stream"},
		{"\x00\xff", nil, "application/octet-stream"},
		{"", nil, "application/octet-stream"},
		{`{"a": 1}`, map[string]string{"content-type": "application/cloudevents+json"}, "application/cloudevents+json"},
		{"plain text", map[string]string{"Content-Type": "text/plain; charset=utf-8"}, "text/plain; charset=utf-8"},
		{"\x00", map[string]string{"CONTENT-TYPE": "application/x-protobuf"}, "application/x-protobuf"},
	}
	for _, tt := range tests {
		m := message(t, tt.headers)
		m.Payload = []byte(tt.payload)
		if err := deliverOne(t, s, m); err != nil {
			t.Fatal(err)
		}
		reqs := e.Requests()
		got := reqs[len(reqs)-1].Header.Values("Content-Type")
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("payload %q, headers %v: Content-Type %q, want %q", tt.payload, tt.headers, got, tt.want)
		}
	}
}

// TestSink_RowHeadersProxiesActOnAreDropped: headers that a proxy or a
// framework in front of the receiver trusts (the sender's address, the
// original host and scheme, a method override, a content encoding) never
// reach the receiver from a row; the row is delivered without them.
func TestSink_RowHeadersProxiesActOnAreDropped(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, 1)
	s := newSink(t, e, nil)
	forged := map[string]string{
		"Forwarded":              "for=203.0.113.7;host=admin.internal",
		"x-forwarded-for":        "127.0.0.1",
		"X-Forwarded-Host":       "admin.internal",
		"X-Forwarded-Proto":      "https",
		"X-Real-IP":              "127.0.0.1",
		"X-HTTP-Method-Override": "DELETE",
		"x-method-override":      "DELETE",
		"X-HTTP-Method":          "DELETE",
		"Content-Encoding":       "gzip",
		"X-Original-URL":         "/admin",
		"x-rewrite-url":          "/admin",
		"True-Client-IP":         "127.0.0.1",
		"CF-Connecting-IP":       "127.0.0.1",
		"X-Client-IP":            "127.0.0.1",
		"X-Original-Host":        "admin.internal",
		"X-Host":                 "admin.internal",
		"Via":                    "1.1 trusted-proxy",
		"Max-Forwards":           "0",
		"Range":                  "bytes=0-0",
	}
	m := message(t, maps.Clone(forged))
	m.Headers["X-Custom"] = "kept"
	if err := deliverOne(t, s, m); err != nil {
		t.Fatal(err)
	}
	r := e.Requests()[0]
	for name := range forged {
		if got := r.Header.Values(name); len(got) != 0 {
			t.Errorf("the receiver got the row's %s: %q", name, got)
		}
	}
	if r.Header.Get("X-Custom") != "kept" {
		t.Error("the row's other headers were dropped too")
	}
}

// TestSink_LimitsAreRefusedBeforePosting: a payload over MaxBodyBytes and
// headers over the relay's header budget fail permanently, naming the limit
// and the sizes, and are never posted.
func TestSink_LimitsAreRefusedBeforePosting(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, 1)
	s := newSink(t, e, func(c *webhook.Config) { c.MaxBodyBytes = 1024 })
	msgs := sinktest.Messages(t, 3)
	msgs[0].Payload = make([]byte, 1024)
	msgs[1].Payload = make([]byte, 1025)
	msgs[2].Headers = map[string]string{"x-big": strings.Repeat("h", sinks.HeaderBytesMax)}
	errs := deliver(t, s, msgs)
	if errs[0] != nil {
		t.Errorf("a payload of MaxBodyBytes: %v", errs[0])
	}
	var limit *sinks.LimitError
	if !sinks.IsPermanent(errs[1]) || !errors.As(errs[1], &limit) || !strings.Contains(errs[1].Error(), "payload of 1025 bytes exceeds WEBHOOK_MAX_BODY_BYTES of 1024 bytes") {
		t.Errorf("a payload over MaxBodyBytes: %v, want a permanent *LimitError naming WEBHOOK_MAX_BODY_BYTES", errs[1])
	}
	if !sinks.IsPermanent(errs[2]) || !errors.As(errs[2], &limit) || limit.Max != sinks.HeaderBytesMax {
		t.Errorf("headers over the budget: %v, want a permanent *LimitError", errs[2])
	}
	if n := len(e.Requests()); n != 1 {
		t.Errorf("%d requests posted, want 1", n)
	}
}

// TestSink_MaxBodyBytesDefault: with no MaxBodyBytes, a payload over
// 4 MiB is refused and not posted.
func TestSink_MaxBodyBytesDefault(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, 1)
	s := newSink(t, e, nil)
	m := message(t, nil)
	m.Payload = make([]byte, 4<<20+1)
	if err := deliverOne(t, s, m); !sinks.IsPermanent(err) || !strings.Contains(err.Error(), "of 4194304 bytes") {
		t.Errorf("a payload of 4 MiB + 1: %v, want a permanent error naming the 4 MiB default", err)
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests posted, want none", n)
	}
}
