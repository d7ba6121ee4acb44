package relay

import (
	"encoding/json"
	"maps"
	"testing"
)

func TestParseHeaders_AgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{}`,
		`{"a": "b"}`,
		`{"content-type": "application/json", "trace-id": "abc"}`,
		` { "a" : "b" , "c":"d" } `,
		`{"a": "line\nbreak", "b": "quote \" inside"}`,
		`{"a": "\u00e9t\u00e9", "b": "\ud83d\ude00", "c": "a\/b"}`,
		`{"ünï": "cödé"}`,
		`{"a": ""}`,
	} {
		got, err := parseHeaders([]byte(in))
		if err != nil {
			t.Errorf("parseHeaders(%s): %v", in, err)
			continue
		}
		var want map[string]string
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("parseHeaders(%s) = %v, want %v", in, got, want)
		}
	}
	if m, err := parseHeaders(nil); m != nil || err != nil {
		t.Errorf("parseHeaders(nil) = %v, %v; want nil, nil", m, err)
	}
	for _, in := range []string{`[]`, `{"a": 1}`, `{"a": "b"`, `{"a" "b"}`, `{"a": "b"} x`} {
		if _, err := parseHeaders([]byte(in)); err == nil {
			t.Errorf("parseHeaders(%s) accepted invalid headers", in)
		}
	}
}

func FuzzParseHeaders(f *testing.F) {
	f.Add([]byte(`{"a": "b", "c": "d"}`))
	f.Add([]byte(`{"a": "\n"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseHeaders(b)
		var want map[string]string
		wantErr := json.Unmarshal(b, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("parseHeaders(%q) error %v, encoding/json error %v", b, err, wantErr)
		}
		if err == nil && !maps.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("parseHeaders(%q) = %v, encoding/json = %v", b, got, want)
		}
	})
}
