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
// framing headers, which belong to the connection, credentials, which belong
// to the operator, and the sink's own.
// Names starting with Proxy- are reserved too.
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
	return reservedHeaders[canonical] || strings.HasPrefix(canonical, "Proxy-")
}

// requestHeader returns the headers of every attempt to deliver m, all but
// the timestamp and signature, which are set right before each attempt. A
// header no HTTP request can carry is a permanent error.
func requestHeader(m *sinks.Message, userAgent string) (http.Header, error) {
	h := make(http.Header, len(m.Headers)+8)
	// Sorted, so that names differing only in case resolve the same way
	// every time.
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		v := m.Headers[k]
		if !validHeaderName(k) {
			return nil, sinks.Permanent(fmt.Errorf("row header name %q is not an HTTP token", k))
		}
		if !validHeaderValue(v) {
			return nil, sinks.Permanent(fmt.Errorf("row header %s has a control character in its value", k))
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if reserved(ck) {
			continue
		}
		h[ck] = []string{v}
	}
	if !validHeaderValue(m.Topic) {
		return nil, sinks.Permanent(fmt.Errorf("topic %q has a control character, so it cannot be sent as %s", m.Topic, headerTopic))
	}
	if h.Get(headerContentType) == "" {
		h[headerContentType] = []string{defaultContentType(m.Payload)}
	}
	h[headerID] = []string{m.IdempotencyKey}
	h[headerIdempotencyKey] = []string{m.IdempotencyKey}
	h[headerTopic] = []string{m.Topic}
	h[headerUserAgent] = []string{userAgent}
	return h, nil
}

// defaultContentType is the content type of a payload whose row names none.
func defaultContentType(payload []byte) string {
	if json.Valid(payload) {
		return contentTypeJSON
	}
	return contentTypeBinary
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
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
