package webhook

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Headers the sink sets itself.
const (
	headerID             = "Webhook-Id"
	headerTimestamp      = "Webhook-Timestamp"
	headerSignature      = "Webhook-Signature"
	headerIdempotencyKey = "Idempotency-Key"
	headerTopic          = "Outbox-Topic"
	headerContentType    = "Content-Type"
	headerUserAgent      = "User-Agent"
)

// Content types chosen when the row names none.
const (
	contentTypeJSON   = "application/json"
	contentTypeBinary = "application/octet-stream"
)

// reservedHeaders are the canonical names a row cannot set: hop-by-hop and
// framing headers, which belong to the connection; headers that proxies and
// frameworks in front of a receiver act on (the client's address and the
// original host and scheme, method overrides that turn the POST into a
// DELETE, a content encoding the body does not have); credentials, which
// belong to the operator; and the sink's own.
// Names starting with Proxy- or X-Forwarded- are reserved too.
var reservedHeaders = map[string]bool{
	"Connection":        true,
	"Keep-Alive":        true,
	"Te":                true,
	"Trailer":           true,
	"Transfer-Encoding": true,
	"Upgrade":           true,
	"Expect":            true,
	"Host":              true,
	"Content-Length":    true,
	"Content-Encoding":  true,
	// Trusted by proxies and frameworks when they come from the proxy in
	// front of the receiver: from a row they would forge the sender's
	// address, host or scheme (RFC 7239 Forwarded, X-Forwarded-*, X-Real-Ip)
	// or the method (Rails, Express method-override, ASP.NET, Google APIs).
	"Forwarded":              true,
	"X-Real-Ip":              true,
	"X-Http-Method-Override": true,
	"X-Method-Override":      true,
	"X-Http-Method":          true,
	// The same for the path, the client's address and the host as other
	// proxies, CDNs and frameworks carry them: IIS and Symfony route by
	// X-Original-Url and X-Rewrite-Url, Akamai and Cloudflare name the
	// client in True-Client-Ip and Cf-Connecting-Ip, and Via and
	// Max-Forwards steer proxies. Range would have the receiver answer a
	// part of its response.
	"X-Original-Url":   true,
	"X-Rewrite-Url":    true,
	"True-Client-Ip":   true,
	"Cf-Connecting-Ip": true,
	"X-Client-Ip":      true,
	"X-Original-Host":  true,
	"X-Host":           true,
	"Via":              true,
	"Max-Forwards":     true,
	"Range":            true,
	// The operator's credentials (WEBHOOK_URL's user info becomes
	// Authorization) are not a row's to replace or add to.
	"Authorization":      true,
	"Cookie":             true,
	headerID:             true,
	headerTimestamp:      true,
	headerSignature:      true,
	headerIdempotencyKey: true,
	headerTopic:          true,
	headerUserAgent:      true,
}

// reserved reports whether a row header named canonical is dropped.
func reserved(canonical string) bool {
	return reservedHeaders[canonical] || strings.HasPrefix(canonical, "Proxy-") || strings.HasPrefix(canonical, "X-Forwarded-")
}

// requestHeader returns the headers of every attempt to deliver m, all but
// the timestamp and signature, which are set right before each attempt, and
// the reserved row headers it dropped. A header no HTTP request can carry,
// or headers over the relay's header budget, are a permanent error.
func requestHeader(m *sinks.Message, userAgent string) (http.Header, []string, error) {
	if err := sinks.CheckMessage(m); err != nil {
		return nil, nil, err
	}
	var dropped []string
	h := make(http.Header, len(m.Headers)+8)
	// Sorted, so that names differing only in case resolve the same way
	// every time.
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		v := m.Headers[k]
		if !sinks.ValidHeaderName(k) {
			return nil, nil, sinks.Permanent(fmt.Errorf("row header name %q is not an HTTP token", k))
		}
		if !validHeaderValue(v) {
			return nil, nil, sinks.Permanent(fmt.Errorf("row header %s has a control character in its value", k))
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if reserved(ck) {
			dropped = append(dropped, ck)
			continue
		}
		h[ck] = []string{v}
	}
	if !validHeaderValue(m.Topic) {
		return nil, nil, sinks.Permanent(fmt.Errorf("topic %q has a control character, so it cannot be sent as %s", m.Topic, headerTopic))
	}
	if strings.Trim(m.Topic, " \t") != m.Topic {
		// HTTP trims a header value: the receiver would see another topic.
		return nil, nil, sinks.Permanent(fmt.Errorf("topic %q starts or ends with white space, which %s would lose", m.Topic, headerTopic))
	}
	if h.Get(headerContentType) == "" {
		h[headerContentType] = []string{defaultContentType(m.Payload)}
	}
	h[headerID] = []string{m.IdempotencyKey}
	h[headerIdempotencyKey] = []string{m.IdempotencyKey}
	h[headerTopic] = []string{m.Topic}
	h[headerUserAgent] = []string{userAgent}
	return h, dropped, nil
}

// defaultContentType is the content type of a payload whose row names none.
func defaultContentType(payload []byte) string {
	if json.Valid(payload) {
		return contentTypeJSON
	}
	return contentTypeBinary
}

// validHeaderValue reports whether s can be sent as a header value: no
// control characters but tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
