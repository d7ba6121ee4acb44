package console

import (
	"strings"
	"testing"
)

func TestVisibleShowsWhatHidesOrReordersText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"order-42", "order-42"},
		{"a\u202Eb", "a⟨U+202E⟩b"},               // right-to-left override
		{"x\u2066y\u2069", "x⟨U+2066⟩y⟨U+2069⟩"}, // isolates
		{"zero\u200Bwidth", "zero⟨U+200B⟩width"},
		{"line\nbreak", "line⟨U+000A⟩break"},
		{"nul\x00", "nul⟨U+0000⟩"},
		{"bad\xffbyte", "bad⟨xFF⟩byte"},
		{"tab\there", "tab\there"},
		{"nbsp\u00a0", "nbsp⟨U+00A0⟩"},
		{"<script>", "<script>"}, // html/template escapes it; visible keeps text as text
		{"日本語", "日本語"},
	} {
		if got := show(tc.in); got != tc.want {
			t.Errorf("show(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestVisibleCutsLongValuesAndSaysTheirSize(t *testing.T) {
	got := show(strings.Repeat("x", 5000))
	if !strings.HasPrefix(got, strings.Repeat("x", showRunes)+"…") || !strings.Contains(got, "5000 bytes") {
		t.Errorf("show of 5000 bytes = %q", got)
	}
}

func TestPreviewTextOrHex(t *testing.T) {
	if v := preview([]byte(`{"id": 42}`)); v.Binary || v.Text != `{"id": 42}` {
		t.Errorf("JSON previewed as %+v", v)
	}
	if v := preview([]byte("line one\nline two\n")); v.Binary {
		t.Errorf("text with line breaks previewed as binary: %+v", v)
	}
	v := preview([]byte{0x00, 0xff, 'a', 'b'})
	if !v.Binary || !strings.Contains(v.Hex, "00 ff 61 62") || !strings.Contains(v.Hex, "|..ab|") {
		t.Errorf("binary previewed as %+v", v)
	}
	if v := preview([]byte("bidi \u202e trick")); !v.Binary {
		t.Errorf("a payload with a bidi override previewed as text: %+v", v)
	}
	// A preview cut in the middle of a character is still text.
	cut := []byte("héllo wörld")[:len("héllo wö")-1]
	if v := preview(cut); v.Binary {
		t.Errorf("a cut UTF-8 payload previewed as binary: %+v", v)
	}
}

func TestBarsScaleToTheChart(t *testing.T) {
	b := bars([]int64{0, 5, 10}, 3, []string{"a", "b", "c"})
	if b[0].H != 0 || b[1].H != chartHeight/2 || b[2].H != chartHeight || b[2].Y != 0 || b[2].Title != "c: 10" {
		t.Errorf("bars = %+v", b)
	}
}

func TestEscapeLikeMatchesTheTopicOnly(t *testing.T) {
	if got := escapeLike(`a%b_c\d`); got != `a\%b\_c\\d` {
		t.Errorf("escapeLike = %q", got)
	}
}
