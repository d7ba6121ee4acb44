package webhook

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"99999999999999999999999", math.MaxInt64, true},
		{"9223372037", math.MaxInt64, true},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Sunday, 01-Mar-26 12:00:10 GMT", 10 * time.Second, true}, // RFC 850
		{"Sun Mar  1 12:00:05 2026", 5 * time.Second, true},        // asctime
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"12abc", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %s, %v; want %s, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestExcerpt(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"", 10, ""},
		{"short", 10, "short"},
		{"  a\r\n\tb  ", 20, "a b"},
		{"nul\x00byte", 20, "nul byte"},
		{"bad \xff\xfe utf8", 20, "bad utf8"},
		{"0123456789abc", 10, "0123456789…"},
		{"ééééé", 5, "éé…"}, // a cut rune is dropped
		{"a\u2028b\u0085c", 20, "a b c"},
	}
	for _, tt := range tests {
		got := excerpt([]byte(tt.in), tt.max)
		if got != tt.want {
			t.Errorf("excerpt(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("excerpt(%q) is not valid UTF-8", tt.in)
		}
	}
}

var errTest = errors.New("post webhook: dial tcp 127.0.0.1:1: connect: connection refused")

func TestGate_BreakerDoublesUpToMax(t *testing.T) {
	var g gate
	now := time.Now()
	for i := 1; i < breakerThreshold; i++ {
		if p := g.connectionFailed(now, errTest); p != 0 {
			t.Fatalf("failure %d opened the breaker", i)
		}
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i, w := range want {
		p := g.connectionFailed(now, errTest)
		if p != w*time.Second {
			t.Fatalf("opening %d: pause %s, want %s", i+1, p, w*time.Second)
		}
		if err := g.check(now); err == nil || !strings.Contains(err.Error(), "the last error: "+errTest.Error()) {
			t.Fatalf("opening %d: check = %v, want a pause quoting the last error", i+1, err)
		}
		// Failures of requests that started before the pause do not
		// count.
		if p := g.connectionFailed(now.Add(p/2), errTest); p != 0 {
			t.Fatalf("a failure during the pause reopened the breaker")
		}
		now = now.Add(p)
		if err := g.check(now); err != nil {
			t.Fatalf("opening %d: still paused after it: %v", i+1, err)
		}
	}
	if !g.responded() {
		t.Error("responded did not report the recovery")
	}
	if g.responded() {
		t.Error("responded reported a recovery twice")
	}
	if p := g.connectionFailed(now, errTest); p != 0 {
		t.Error("one failure after a response opened the breaker")
	}
}

func TestGate_OneRetryAfterDoesNotPauseTheSink(t *testing.T) {
	var g gate
	now := time.Now()
	for range 9 {
		g.answered(now, false, 0, 204)
	}
	if g.answered(now, true, 10*time.Second, 429) {
		t.Error("one Retry-After among successes paused the sink")
	}
	if err := g.check(now); err != nil {
		t.Errorf("check after one Retry-After: %v", err)
	}
}

func TestGate_MostResponsesAskingToWaitPauseTheSink(t *testing.T) {
	var g gate
	now := time.Now()
	started := 0
	for i := range 11 { // 7 of 11 ask to wait; the 11th starts the pause
		if g.answered(now, i%3 != 0, 10*time.Second, 429) {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("%d pauses started, want 1 once most responses asked to wait", started)
	}
	if err := g.check(now.Add(5 * time.Second)); err == nil || !strings.Contains(err.Error(), "asked to retry later") {
		t.Errorf("check during the pause: %v", err)
	}
	if err := g.check(now.Add(10 * time.Second)); err != nil {
		t.Errorf("check after the pause: %v", err)
	}
	if g.answered(now, true, 0, 429) {
		t.Error("Retry-After 0 paused")
	}
}

func TestSignature_KnownVector(t *testing.T) {
	// From the Standard Webhooks reference libraries' tests.
	secrets, err := ParseSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := signature(secrets, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("signature = %q, want %q", got, want)
	}
}
