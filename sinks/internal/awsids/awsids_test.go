package awsids

import (
	"strings"
	"testing"
)

// The rules are SQS's, as the API reference states them for
// MessageDeduplicationId and MessageGroupId: "can be up to 128 characters
// long", "can contain alphanumeric characters (a-z, A-Z, 0-9) and
// punctuation (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~)". The emulator the sink's
// tests run against (fauxqs) checks neither, so these tests are the proof.
func TestID(t *testing.T) {
	t.Parallel()
	punct := `!"#$%&'()*+,-./:;<=>?@[\]^_` + "`{|}~"
	for _, tt := range []struct {
		name, in string
		kept     bool
	}{
		{"uuid", "0e7c5d1e-8f7b-4a63-9a48-1b1c5bb0a8c4", true},
		{"punctuation", "a" + punct + "z", true},
		{"at_max", strings.Repeat("k", Max), true},
		{"over_max", strings.Repeat("k", Max+1), false},
		{"empty", "", false},
		{"space", "order 42", false},
		{"tab", "a\tb", false},
		{"nul", "a\x00b", false},
		{"del", "a\x7fb", false},
		{"non_ascii", "café", false},
		{"invalid_utf8", "a\xffb", false},
		{"looks_hashed", HashPrefix + "abc", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ID(tt.in)
			if !Fits(got) {
				t.Fatalf("ID(%q) = %q, which SQS refuses", tt.in, got)
			}
			if kept := got == tt.in; kept != tt.kept {
				t.Errorf("ID(%q) = %q: kept %v, want %v", tt.in, got, kept, tt.kept)
			}
			if !tt.kept && (!strings.HasPrefix(got, HashPrefix) || len(got) != len(HashPrefix)+64) {
				t.Errorf("ID(%q) = %q, want %s and 64 hex digits", tt.in, got, HashPrefix)
			}
			if again := ID(tt.in); again != got {
				t.Errorf("ID is not deterministic: %q then %q", got, again)
			}
		})
	}
	if ID("a b") == ID("a  b") || ID(HashPrefix+"x") == ID(ID(HashPrefix+"x")) {
		t.Error("different values share an id")
	}
	if DeduplicationID("k") != "k" || GroupID("k") != "k" {
		t.Error("a key that fits is not kept")
	}
}
