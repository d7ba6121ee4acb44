package relay

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on what a row provides when it goes into a log line or a span:
// a producer chooses its topic, destination and, through them, the text
// of many sinks' errors, and one row must not make a log line or a span
// of megabytes (three 2 MiB topics once made a 6.3 MB line).
const (
	// maxLoggedValueBytes bounds a value of a row (a topic, a destination,
	// a destination name on a span) in a log line or a span attribute.
	maxLoggedValueBytes = 200
	// maxLoggedErrBytes bounds an error text in a log line: a sink's error
	// may quote the row's topic, and stays readable at this length.
	maxLoggedErrBytes = 1024
)

// clip returns s when it is valid UTF-8 of at most n bytes; else its
// longest prefix of whole characters that fits in n bytes, invalid bytes
// replaced by U+FFFD, followed by "…(N bytes)", N being len(s). The
// result is valid UTF-8 of at most n bytes plus the marker.
func clip(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), n) + len("…( bytes)") + 20)
	cut := false
	for _, r := range s {
		// An invalid byte comes as utf8.RuneError, written as U+FFFD.
		if b.Len()+utf8.RuneLen(r) > n {
			cut = true
			break
		}
		b.WriteRune(r)
	}
	if cut {
		b.WriteString("…(")
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteString(" bytes)")
	}
	return b.String()
}
