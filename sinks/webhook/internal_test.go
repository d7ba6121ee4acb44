package webhook

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/sinks"
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

// request admits a request at now and returns its ticket, failing t if the
// gate does not let it start.
func request(t *testing.T, g *gate, now time.Time) ticket {
	t.Helper()
	tk, probing, err := g.admit(now)
	if err != nil || probing != nil {
		t.Fatalf("admit: %v (a probe in flight: %v), want a request admitted", err, probing != nil)
	}
	return tk
}

var (
	down   = result{sig: signalDown, err: errTest}
	up     = result{sig: signalUp, status: 204}
	wait10 = result{sig: signalWait, status: 429, retryAfter: 10 * time.Second}
)

func TestGate_BreakerDoublesUpToMax(t *testing.T) {
	var g gate
	now := time.Now()
	// A request in flight while the breaker opens, and through its pauses.
	early := request(t, &g, now)
	for i := 1; i < breakerThreshold; i++ {
		if v := g.done(request(t, &g, now), now, down); v.pause != 0 {
			t.Fatalf("failure %d opened the breaker", i)
		}
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i, w := range want {
		// The fifth failure opens the breaker; then, after each pause,
		// the probe fails too.
		tk := request(t, &g, now)
		if tk.probe != (i > 0) {
			t.Fatalf("opening %d: probe = %v", i+1, tk.probe)
		}
		v := g.done(tk, now, down)
		if p := v.pause; p != w*time.Second || v.reopened != (i > 0) {
			t.Fatalf("opening %d: pause %s (reopened %v), want %s", i+1, p, v.reopened, w*time.Second)
		}
		if err := g.check(now); err == nil || !strings.Contains(err.Error(), "the last error: "+errTest.Error()) {
			t.Fatalf("opening %d: check = %v, want a pause quoting the last error", i+1, err)
		}
		// Failures of requests that started before the pause do not
		// count: the pause accounts for them.
		if v := g.done(early, now.Add(v.pause/2), down); v.pause != 0 || !v.stale {
			t.Fatalf("a failure during the pause: %+v, want stale, reopening nothing", v)
		}
		now = now.Add(v.pause)
		if err := g.check(now); err != nil {
			t.Fatalf("opening %d: still paused after it: %v", i+1, err)
		}
	}
	if v := g.done(request(t, &g, now), now, up); !v.recovered {
		t.Error("the probe's success did not report the recovery")
	}
	if v := g.done(request(t, &g, now), now, up); v.recovered {
		t.Error("a recovery reported twice")
	}
	if v := g.done(request(t, &g, now), now, down); v.pause != 0 {
		t.Error("one failure after a response opened the breaker")
	}
}

// After a pause one request, the probe, tests the endpoint: the sink is
// not available to batches while it is in flight, other requests wait for
// its result, and a probe that found the endpoint down pauses the sink
// again, one that found it up closes the breaker.
func TestGate_OneRequestProbesAfterAPause(t *testing.T) {
	var g gate
	now := time.Now()
	for range breakerThreshold {
		g.done(request(t, &g, now), now, down)
	}
	if _, _, err := g.admit(now); err == nil {
		t.Fatal("a request was admitted while the breaker is open")
	}
	now = now.Add(breakerMinPause)
	probe := request(t, &g, now)
	if !probe.probe {
		t.Fatal("the first request after the pause is not the probe")
	}
	_, probing, err := g.admit(now)
	if err != nil || probing == nil {
		t.Fatalf("a second request while the probe is in flight: %v, want to wait for the probe", err)
	}
	if err := g.check(now); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "probes") {
		t.Errorf("check while the probe is in flight: %v, want unavailable, naming the probe", err)
	}
	if v := g.done(probe, now, result{sig: signalWait, status: 503, retryAfter: 5 * time.Second, err: errTest}); !v.reopened || v.pause != 5*time.Second {
		t.Errorf("a probe asked to retry in 5s: %+v, want the breaker reopened for 5s", v)
	}
	select {
	case <-probing:
	default:
		t.Fatal("the probe's result did not release the requests waiting for it")
	}
	now = now.Add(5 * time.Second)
	probe = request(t, &g, now)
	if !probe.probe {
		t.Fatal("no probe after the second pause")
	}
	if v := g.done(probe, now, up); !v.recovered {
		t.Errorf("the probe answered: %+v, want the breaker closed", v)
	}
	if tk := request(t, &g, now); tk.probe {
		t.Error("a probe after the endpoint answered")
	}
}

// A 5xx for some messages among successes is theirs: only a run of them
// opens the breaker.
func TestGate_ServerErrorsAmongSuccessesDoNotOpenTheBreaker(t *testing.T) {
	var g gate
	now := time.Now()
	failed := result{sig: signalDown, status: 500, err: errTest}
	for i := range 100 {
		r := up
		if i%breakerThreshold != 0 {
			r = failed
		}
		if v := g.done(request(t, &g, now), now, r); v.pause != 0 {
			t.Fatalf("response %d paused the sink: %+v", i, v)
		}
	}
}

func TestGate_OneRetryAfterDoesNotPauseTheSink(t *testing.T) {
	var g gate
	now := time.Now()
	for range 9 {
		g.done(request(t, &g, now), now, up)
	}
	if v := g.done(request(t, &g, now), now, wait10); v.pause != 0 {
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
		r := wait10
		if i%3 == 0 {
			r = result{sig: signalUp, status: 429}
		}
		if v := g.done(request(t, &g, now), now, r); v.pause > 0 {
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

	var g0 gate
	for range rateLimitWindow {
		if v := g0.done(request(t, &g0, now), now, result{sig: signalWait, status: 429}); v.pause > 0 {
			t.Fatal("Retry-After 0 paused")
		}
	}
}

// The probe is the message tried the fewest times among those that have
// not failed as a probe; the others keep their order.
func TestProbed_OrderPutsTheProbeFirst(t *testing.T) {
	msg := func(key string, attempt int) sinks.Message {
		m := sinks.Message{ID: 1, Attempt: attempt}
		m.IdempotencyKey = key
		return m
	}
	var p probed
	p.add("a")
	p.add("z")
	tests := []struct {
		name     string
		msgs     []sinks.Message
		probeDue bool
		want     []int
	}{
		{"no probe due", []sinks.Message{msg("a", 1), msg("b", 1)}, false, []int{0, 1}},
		{"one message", []sinks.Message{msg("a", 1)}, true, []int{0}},
		{"not a failed probe first", []sinks.Message{msg("a", 1), msg("b", 2), msg("c", 1)}, true, []int{2, 0, 1}},
		{"the fewest attempts", []sinks.Message{msg("b", 3), msg("c", 2), msg("d", 2)}, true, []int{1, 0, 2}},
		{"every one a failed probe", []sinks.Message{msg("a", 2), msg("z", 1)}, true, []int{1, 0}},
		{"first on a tie", []sinks.Message{msg("b", 1), msg("c", 1)}, true, []int{0, 1}},
	}
	for _, tt := range tests {
		if got := p.order(tt.msgs, tt.probeDue); !slices.Equal(got, tt.want) {
			t.Errorf("%s: order %v, want %v", tt.name, got, tt.want)
		}
	}
	p.clear()
	if got := p.order([]sinks.Message{msg("a", 1), msg("b", 1)}, true); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("after clear: order %v, want a first again", got)
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
