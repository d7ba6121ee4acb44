package webhook

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// bodyExcerptMax bounds the response body quoted in an error, in bytes.
const bodyExcerptMax = 512

// drainMax bounds what is read of a response body, so that the connection
// can be reused; a longer body closes it.
const drainMax = 64 << 10

// permanentStatus are the responses that say the message itself will never
// be accepted. 401, 403 and 404 are not among them: they nearly always mean
// a wrong secret, URL or permission on the receiving side, the same for
// every message, and dead-lettering everything after one attempt would turn
// a configuration slip into a pile of dead letters (see doc.go).
var permanentStatus = map[int]bool{
	http.StatusBadRequest:            true, // 400
	http.StatusGone:                  true, // 410
	http.StatusRequestEntityTooLarge: true, // 413
	http.StatusUnsupportedMediaType:  true, // 415
	http.StatusUnprocessableEntity:   true, // 422
	// 431: the row's headers are too large for the endpoint; they will
	// be as large next time.
	http.StatusRequestHeaderFieldsTooLarge: true,
}

// StatusError is a response other than 2xx.
type StatusError struct {
	// StatusCode is the response's status code.
	StatusCode int
	// Body is the start of the response body: at most 512 bytes of valid
	// UTF-8 without control characters.
	Body string
	// Location is where a redirect pointed, without its query.
	Location string
}

// Error names the status, where a redirect pointed and the start of the
// body.
func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "webhook responded %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.StatusCode >= 300 && e.StatusCode < 400 {
		loc := e.Location
		if loc == "" {
			loc = "(no Location)"
		}
		fmt.Fprintf(&b, ": redirect to %s not followed; set the webhook URL to the final address", loc)
	}
	if e.Body != "" {
		b.WriteString(": ")
		b.WriteString(e.Body)
	}
	return b.String()
}

// Permanent reports whether the status says the message will never be
// accepted.
func (e *StatusError) Permanent() bool { return permanentStatus[e.StatusCode] }

// readResponse reads what is kept of a non-2xx response and closes its
// body.
func readResponse(resp *http.Response) *StatusError {
	e := &StatusError{StatusCode: resp.StatusCode}
	head := make([]byte, bodyExcerptMax+1)
	n, _ := io.ReadFull(resp.Body, head)
	e.Body = excerpt(head[:n], bodyExcerptMax)
	discard(resp.Body)
	if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		e.Location = redactLocation(loc)
	}
	return e
}

// discard reads a little of what is left of body, so that the connection
// can be reused, and closes it.
func discard(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainMax))
	_ = body.Close()
}

// excerpt returns at most max bytes of b as one line of valid UTF-8:
// invalid bytes dropped, control characters and runs of white space turned
// into single spaces, an ellipsis when b was longer.
func excerpt(b []byte, max int) string {
	truncated := len(b) > max
	if truncated {
		b = b[:max]
	}
	var out strings.Builder
	space := false
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		switch {
		case r == utf8.RuneError && size <= 1:
			continue
		case r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == ' ' || r == '\u2028' || r == '\u2029':
			space = true
			continue
		}
		if space && out.Len() > 0 {
			out.WriteByte(' ')
		}
		space = false
		out.WriteRune(r)
	}
	if truncated {
		out.WriteString("…")
	}
	return out.String()
}

// redactLocation is a redirect target for an error text: without
// credentials or query, at most 200 bytes.
func redactLocation(loc string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return "(unparsable Location)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return excerpt([]byte(u.String()), 200)
}
