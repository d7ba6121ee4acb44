package relay

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"orders.created", 200, "orders.created"},
		{"", 200, ""},
		{strings.Repeat("x", 200), 200, strings.Repeat("x", 200)},
		{strings.Repeat("x", 201), 200, strings.Repeat("x", 200) + "…(201 bytes)"},
		{strings.Repeat("x", 2<<20), 200, strings.Repeat("x", 200) + "…(2097152 bytes)"},
		// A character is never cut in two: é is two bytes.
		{"a" + strings.Repeat("é", 10), 4, "aé…(21 bytes)"},
		// Invalid bytes become U+FFFD (three bytes), whatever the length.
		{"a\xffb", 200, "a\uFFFDb"},
		{"ab\xff\xffcd", 4, "ab…(6 bytes)"},
	} {
		got := clip(tc.in, tc.n)
		if got != tc.want {
			t.Errorf("clip(%.40q…, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("clip(%.40q…, %d) = %q: not valid UTF-8", tc.in, tc.n, got)
		}
	}
}

// Three topics of 2 MiB once made one failure line of 6.3 MB: the line
// names each topic by its first maxLoggedValueBytes and its length, and
// an error quoting a topic (as sinks' errors do) is cut as well.
func TestFailureLog_RowValuesAreCutInTheLine(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	f := newFailureLog()
	destination := "nowhere." + strings.Repeat("d", 1<<20)
	for i, c := range []string{"a", "b", "c"} {
		topic := strings.Repeat(c, 2<<20)
		o := rowOutcome{kind: kindRetry, err: `publish to "` + topic + `": no responders`}
		f.add(&sinks.Message{ID: int64(i + 1), Message: outbox.Message{Topic: topic}}, o, false, trace.SpanContext{})
	}
	f.logGroups(log, destination)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines for three errors, want 3: %.600s", len(lines), buf.String())
	}
	for i, line := range lines {
		if len(line) > 2048 {
			t.Errorf("a failure line of %d bytes for a 2 MiB topic: want it cut (starts %.300s)", len(line), line)
		}
		c := string(rune('a' + i))
		for _, want := range []string{
			`"topics":"` + strings.Repeat(c, maxLoggedValueBytes) + `…(2097152 bytes)"`,
			`"sink":"nowhere.` + strings.Repeat("d", maxLoggedValueBytes-len("nowhere.")) + `…(1048584 bytes)"`,
			`"err":"publish to \"` + strings.Repeat(c, maxLoggedErrBytes-len(`publish to "`)) + `…(2097180 bytes)"`,
		} {
			if !strings.Contains(line, want) {
				t.Errorf("line %d does not hold %.60q…: %.600s", i+1, want, line)
			}
		}
	}
}
