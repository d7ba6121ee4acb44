package console

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// How much of a value the pages show: a value in a table cell, and a value
// on a detail page.
const (
	showRunes     = 160
	showFullRunes = 16 << 10
)

// show returns s for a table cell: cut to showRunes characters (saying how
// long it was), with every character that could hide or reorder text
// shown as a visible mark (visible). html/template escapes the result.
func show(s string) string { return visible(s, showRunes) }

// showFull is show for a detail page: cut at showFullRunes.
func showFull(s string) string { return visible(s, showFullRunes) }

// visible returns s cut to limit runes, invalid UTF-8 bytes shown as ⟨xNN⟩
// and control, format (bidirectional overrides and isolates, zero-width
// characters) and other invisible characters as ⟨U+XXXX⟩, so that a
// producer's value cannot make a page say something it does not hold.
// Spaces and tabs stay; line breaks are marks too.
func visible(s string, limit int) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if n == limit {
			fmt.Fprintf(&b, "… (%d bytes in all)", len(s))
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, "⟨x%02X⟩", s[i])
		case r == '\t' || r == ' ':
			b.WriteRune(r)
		case hidden(r):
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		default:
			b.WriteRune(r)
		}
		i += size
		n++
	}
	return b.String()
}

// hidden reports whether r would not show as itself: controls, format
// characters (Cf: bidi overrides, isolates, zero-width joiners, the BOM),
// private-use and unassigned code points (none of them graphic), and
// spaces other than the space.
func hidden(r rune) bool {
	return !unicode.IsGraphic(r) || (unicode.Is(unicode.Zs, r) && r != ' ')
}

// payloadView is how a page shows a payload: as text when it is printable
// UTF-8, as a hex dump otherwise.
type payloadView struct {
	Text   string
	Hex    string
	Binary bool
}

// preview shows payload (already cut to at most PreviewBytes by the
// database) as text or, when it is not printable UTF-8 (a cut in the
// middle of a character aside), as a hex dump.
func preview(payload []byte) payloadView {
	text := payload
	// A cut may have split the last character.
	for k := 1; k <= 3 && len(text) > 0 && !utf8.Valid(text); k++ {
		if len(payload)-k < 0 {
			break
		}
		text = payload[:len(payload)-k]
	}
	if utf8.Valid(text) && printable(string(text)) {
		return payloadView{Text: string(text)}
	}
	return payloadView{Hex: hexDump(payload), Binary: true}
}

// printable reports whether s holds nothing hidden but line breaks and
// tabs.
func printable(s string) bool {
	for _, r := range s {
		if r != '\n' && r != '\r' && r != '\t' && hidden(r) {
			return false
		}
	}
	return true
}

// hexDump formats b as offset, 16 bytes in hex and their printable ASCII,
// per line.
func hexDump(b []byte) string {
	var out strings.Builder
	for off := 0; off < len(b); off += 16 {
		line := b[off:min(off+16, len(b))]
		fmt.Fprintf(&out, "%08x  ", off)
		for i := range 16 {
			if i < len(line) {
				fmt.Fprintf(&out, "%02x ", line[i])
			} else {
				out.WriteString("   ")
			}
			if i == 7 {
				out.WriteByte(' ')
			}
		}
		out.WriteString(" |")
		for _, c := range line {
			if c >= 0x20 && c < 0x7f {
				out.WriteByte(c)
			} else {
				out.WriteByte('.')
			}
		}
		out.WriteString("|\n")
	}
	return out.String()
}

// bar is one bar of a chart drawn in SVG attributes (which a strict
// Content-Security-Policy allows, unlike style attributes).
type bar struct {
	X, Y, W, H int
	Title      string
}

// chartHeight is the height of bars' charts, in pixels.
const chartHeight = 40

// bars scales counts to a chart chartHeight pixels high, one bar of width
// w per count, titled by label(i).
func bars(counts []int64, w int, labels []string) []bar {
	var top int64 = 1
	for _, c := range counts {
		top = max(top, c)
	}
	out := make([]bar, len(counts))
	for i, c := range counts {
		h := int(c * chartHeight / top)
		if c > 0 && h == 0 {
			h = 1
		}
		title := fmt.Sprint(c)
		if i < len(labels) {
			title = labels[i] + ": " + title
		}
		out[i] = bar{X: i * w, Y: chartHeight - h, W: max(1, w-1), H: h, Title: title}
	}
	return out
}
