package relay

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// parseHeaders decodes a headers column: a JSON object of strings, as
// PostgreSQL prints jsonb. Strings without escapes, the common case, are
// taken without the reflection of encoding/json, which was a fifth of the
// relay's CPU time at full speed; anything unusual goes to encoding/json.
func parseHeaders(b []byte) (map[string]string, error) {
	if b == nil {
		return nil, nil
	}
	if m, ok := parseFlatObject(b); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// parseFlatObject parses {"k": "v", …} and reports false for anything it
// does not handle itself.
func parseFlatObject(b []byte) (map[string]string, bool) {
	p := flatParser{b: b}
	if !p.consume('{') {
		return nil, false
	}
	m := make(map[string]string, 4)
	if p.consume('}') {
		return m, p.end()
	}
	for {
		k, ok := p.str()
		if !ok || !p.consume(':') {
			return nil, false
		}
		v, ok := p.str()
		if !ok {
			return nil, false
		}
		m[k] = v
		if p.consume(',') {
			continue
		}
		if p.consume('}') {
			return m, p.end()
		}
		return nil, false
	}
}

type flatParser struct {
	b []byte
	i int
}

func (p *flatParser) skipSpace() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *flatParser) consume(c byte) bool {
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *flatParser) end() bool {
	p.skipSpace()
	return p.i == len(p.b)
}

// str reads a string without escapes or control characters.
func (p *flatParser) str() (string, bool) {
	if !p.consume('"') {
		return "", false
	}
	rest := p.b[p.i:]
	n := bytes.IndexByte(rest, '"')
	if n < 0 || bytes.IndexByte(rest[:n], '\\') >= 0 {
		return "", false
	}
	for _, c := range rest[:n] {
		if c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(rest[:n]) {
		return "", false
	}
	p.i += n + 1
	return string(rest[:n]), true
}
