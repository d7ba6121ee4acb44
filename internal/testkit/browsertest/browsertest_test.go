package browsertest

import (
	"bytes"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// payload is what an attacker would put in a row: it must come back as text.
const payload = `<script>alert("x")</script><img src=x onerror=alert(2)>`

// site serves the pages the tests read. Each page says in its path whether
// it sends a Content-Security-Policy.
type site struct {
	*httptest.Server
	mu    sync.Mutex
	posts []string // "path x=value" per POST
}

func serve(t *testing.T) *site {
	t.Helper()
	s := &site{}
	mux := http.NewServeMux()
	page := func(path, csp, body string) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			if csp != "" {
				w.Header().Set("Content-Security-Policy", csp)
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, "<!doctype html><html><head><title>t</title><link rel=stylesheet href=/style.css></head><body>%s</body></html>", body)
		})
	}
	mux.HandleFunc("GET /style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		fmt.Fprint(w, "body { font-family: sans-serif; } .hidden { display: none; }")
	})
	page("/strict", "default-src 'none'; style-src 'self'",
		`<h1>Dead letters</h1><p id=payload>`+html.EscapeString(payload)+`</p><p id=hidden class=hidden>not shown</p>`)
	page("/open", "", `<p>open</p><script>console.log("hello", 42); alert(1); throw new Error("boom")</script>`)
	page("/blocked", "default-src 'none'", `<p id=blocked>blocked</p><script>alert(1)</script>`)
	page("/form", "default-src 'none'; style-src 'self'; form-action 'self'",
		`<form method=post action=/forged><input id=x name=x value=y><button id=send type=submit>Send</button></form>`)
	mux.HandleFunc("POST /forged", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.posts = append(s.posts, r.URL.Path+" x="+r.PostFormValue("x"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<!doctype html><p id=answer>forbidden</p>`)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *site) postsSoFar() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.posts)
}

func TestEscapedPayloadIsReadBackAsText(t *testing.T) {
	s := serve(t)
	b := New(t)
	b.Navigate(t, s.URL+"/strict")
	if got := b.Text(t, "#payload"); got != payload {
		t.Errorf("text of #payload = %q, want %q", got, payload)
	}
	if got := b.Text(t, "h1"); got != "Dead letters" {
		t.Errorf("text of h1 = %q", got)
	}
	if !b.Exists(t, "#payload") || b.Exists(t, "script") || b.Exists(t, "img") {
		t.Errorf("the payload became nodes: %s", b.HTML(t))
	}
	if !strings.Contains(b.HTML(t), "&lt;script&gt;") {
		t.Errorf("HTML lacks the escaped payload: %s", b.HTML(t))
	}
	if got := b.Location(t); got != s.URL+"/strict" {
		t.Errorf("location = %q", got)
	}
	if got := b.LastStatus(); got != http.StatusOK {
		t.Errorf("status = %d, want 200", got)
	}
	b.NoScriptRan(t)
	if v := b.CSPViolations(); len(v) > 0 {
		t.Errorf("the stylesheet is 'self', yet: %q", v)
	}
}

// failures records what NoScriptRan reports instead of failing the test.
type failures struct {
	testing.TB
	errors []string
}

func (f *failures) Helper() {}
func (f *failures) Errorf(format string, a ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, a...))
}

func TestScriptsAreSeenWithoutCSP(t *testing.T) {
	s := serve(t)
	b := New(t)
	b.Navigate(t, s.URL+"/open") // returns: the alert was dismissed
	if got := b.Dialogs(); !slices.Equal(got, []string{"alert: 1"}) {
		t.Errorf("dialogs = %q, want the alert", got)
	}
	if got := b.Exceptions(); len(got) != 1 || !strings.Contains(got[0], "Error: boom") {
		t.Errorf("exceptions = %q, want boom", got)
	}
	if got := b.ConsoleMessages(); !slices.Contains(got, "log: hello 42") {
		t.Errorf("console = %q, want the log call", got)
	}
	f := &failures{TB: t}
	b.NoScriptRan(f)
	if len(f.errors) != 1 {
		t.Errorf("NoScriptRan reported %q, want one failure", f.errors)
	}
}

func TestCSPStopsInlineScript(t *testing.T) {
	s := serve(t)
	b := New(t)
	b.Navigate(t, s.URL+"/blocked")
	if got := b.Text(t, "#blocked"); got != "blocked" {
		t.Errorf("text = %q", got)
	}
	b.NoScriptRan(t)
	if got := b.Dialogs(); len(got) > 0 {
		t.Errorf("dialogs = %q, want none", got)
	}
	// Chromium logs the violation (Log.entryAdded, source security, level
	// error): "Executing inline script violates the following Content
	// Security Policy directive 'default-src 'none''. …"
	// The stylesheet, not 'self' here, is refused too.
	v := b.CSPViolations()
	if !slices.ContainsFunc(v, func(m string) bool { return strings.Contains(m, "inline script") }) {
		t.Errorf("CSP violations = %q, want the inline script's", v)
	}
	if !slices.ContainsFunc(b.ConsoleMessages(), func(m string) bool {
		return strings.HasPrefix(m, "error: ") && strings.Contains(m, "Content Security Policy")
	}) {
		t.Errorf("console = %q, want the violation", b.ConsoleMessages())
	}
}

func TestFormPostStatus(t *testing.T) {
	s := serve(t)
	b := New(t)

	b.Navigate(t, s.URL+"/form")
	if got := b.LastStatus(); got != http.StatusOK {
		t.Fatalf("status = %d, want 200", got)
	}
	b.SetValue(t, "#x", "clicked")
	b.Click(t, "#send")
	if got := b.LastStatus(); got != http.StatusForbidden {
		t.Errorf("after the click, status = %d, want 403", got)
	}
	if got := b.Text(t, "#answer"); got != "forbidden" {
		t.Errorf("answer = %q", got)
	}
	if got := b.Location(t); got != s.URL+"/forged" {
		t.Errorf("location = %q", got)
	}

	b.Navigate(t, s.URL+"/form")
	b.Submit(t, "#x")
	if got := b.LastStatus(); got != http.StatusForbidden {
		t.Errorf("after Submit, status = %d, want 403", got)
	}

	b.Navigate(t, s.URL+"/form")
	b.SetValue(t, "#x", "typed")
	b.SendKeys(t, "#x", "\r") // Enter submits the form
	if got := b.LastStatus(); got != http.StatusForbidden {
		t.Errorf("after Enter, status = %d, want 403", got)
	}

	want := []string{"/forged x=clicked", "/forged x=y", "/forged x=typed"}
	if got := s.postsSoFar(); !slices.Equal(got, want) {
		t.Errorf("posts = %q, want %q", got, want)
	}
	b.NoScriptRan(t)
}

func TestScreenshot(t *testing.T) {
	s := serve(t)
	b := New(t)
	b.Navigate(t, s.URL+"/strict")
	path := filepath.Join(t.TempDir(), "shots", "strict.png")
	b.Screenshot(t, path)
	png, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("%s: %d bytes, starting %q: want a PNG", path, len(png), png[:min(len(png), 8)])
	}
}
