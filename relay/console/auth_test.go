package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
)

// newTestConsole returns a console with no outboxes, served by an
// httptest server: enough for what needs no database.
func newTestConsole(t *testing.T, secret string) *httptest.Server {
	t.Helper()
	log, _ := testlog.New(t, slog.LevelInfo)
	h, err := New(Config{Outboxes: func(context.Context) []Outbox { return nil }, Secret: secret, Log: log, Served: "a test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestNewRefusesAShortSecret(t *testing.T) {
	_, err := New(Config{Outboxes: func(context.Context) []Outbox { return nil }, Secret: "short"})
	if err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("New with a 5-byte secret: %v", err)
	}
}

func TestEveryResponseCarriesTheSecurityHeaders(t *testing.T) {
	srv := newTestConsole(t, "")
	for _, path := range []string{"/console/", "/console/nope", "/console/assets/console.css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Content-Security-Policy"); got != contentSecurityPolicy {
			t.Errorf("%s: Content-Security-Policy %q", path, got)
		}
		for _, h := range []string{"X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy"} {
			if resp.Header.Get(h) == "" {
				t.Errorf("%s: no %s", path, h)
			}
		}
	}
}

func TestReadOnlyRefusesEveryAction(t *testing.T) {
	srv := newTestConsole(t, "")
	for _, path := range []string{"/console/o/-/outbox/dead/retry", "/console/o/-/outbox/dead/purge", "/console/o/-/outbox/cancel", "/console/signin"} {
		resp, err := http.PostForm(srv.URL+path, url.Values{"id": {"1"}, "confirm": {"yes"}})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "read-only") {
			t.Errorf("POST %s on a read-only console: %d %s", path, resp.StatusCode, body)
		}
	}
}

// signIn signs in to srv with secret and returns the session cookie.
func signIn(t *testing.T, srv *httptest.Server, secret string) (*http.Cookie, int) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(srv.URL+"/console/signin", url.Values{"secret": {secret}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("session cookie %+v: want HttpOnly and SameSite=Strict", c)
			}
			return c, resp.StatusCode
		}
	}
	return nil, resp.StatusCode
}

func TestSignInNeedsTheSecret(t *testing.T) {
	const secret = "correct horse battery staple"
	srv := newTestConsole(t, secret)
	if c, status := signIn(t, srv, "wrong secret, long enough"); c != nil || status != http.StatusForbidden {
		t.Errorf("a wrong secret: cookie %v, status %d", c, status)
	}
	if c, status := signIn(t, srv, secret); c == nil || status != http.StatusSeeOther {
		t.Errorf("the secret: cookie %v, status %d", c, status)
	}
}

func TestSignInClosesAfterTenFailures(t *testing.T) {
	srv := newTestConsole(t, "correct horse battery staple")
	for range signinBurst {
		signIn(t, srv, "wrong secret, long enough")
	}
	if _, status := signIn(t, srv, "correct horse battery staple"); status != http.StatusTooManyRequests {
		t.Errorf("the right secret after %d failures: status %d, want 429", signinBurst, status)
	}
}

func TestActionsNeedSessionTokenAndSameOrigin(t *testing.T) {
	const secret = "correct horse battery staple"
	srv := newTestConsole(t, secret)
	cookie, _ := signIn(t, srv, secret)
	h, _ := New(Config{Outboxes: func(context.Context) []Outbox { return nil }, Secret: secret})
	sessionValue := cookie.Value
	token := h.csrfToken(sessionValue)
	post := func(form url.Values, withCookie bool, header map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/console/o/-/outbox/dead/purge", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if withCookie {
			req.AddCookie(cookie)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	form := url.Values{"id": {"1"}, csrfField: {token}}
	if status, body := post(form, false, nil); status != http.StatusForbidden || !strings.Contains(body, "Sign in") {
		t.Errorf("without the session: %d %s", status, body)
	}
	if status, body := post(url.Values{"id": {"1"}}, true, nil); status != http.StatusForbidden || !strings.Contains(body, "token") {
		t.Errorf("without the form token: %d %s", status, body)
	}
	if status, body := post(form, true, map[string]string{"Sec-Fetch-Site": "cross-site"}); status != http.StatusForbidden || !strings.Contains(body, "another site") {
		t.Errorf("cross-site: %d %s", status, body)
	}
	if status, body := post(form, true, map[string]string{"Origin": "https://evil.example"}); status != http.StatusForbidden || !strings.Contains(body, "another site") {
		t.Errorf("from another origin: %d %s", status, body)
	}
	// With all three, the action reaches the outbox lookup: this console
	// has none.
	if status, body := post(form, true, map[string]string{"Sec-Fetch-Site": "same-origin"}); status != http.StatusNotFound || !strings.Contains(body, "No outbox") {
		t.Errorf("a genuine action: %d %s", status, body)
	}
}
