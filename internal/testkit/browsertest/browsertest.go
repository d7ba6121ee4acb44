// Package browsertest drives a real headless Chromium (Debian's chromium
// package) for each test, through chromedp, so that the web console's pages
// are read, clicked and submitted as a browser does it. A Browser records
// what scripts did on its pages — console API calls, uncaught exceptions,
// dialogs (each dismissed at once, so nothing hangs) — and what the browser
// logged, the Content-Security-Policy violations among it, so that a test
// can show that a page ran no script at all.
//
// When no browser is found the test fails with instructions: browser tests
// never skip.
package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// EnvBrowser names the browser to run instead of the first of chromium,
// chromium-browser and google-chrome on the PATH: a path or a command name.
const EnvBrowser = "OUTBOX_RELAY_CHROMIUM"

const howToInstall = "These tests drive a real headless Chromium and never skip. Debian: apt-get install --no-install-recommends chromium fonts-dejavu-core (`bash .ci/prerequisites` does it), or point " + EnvBrowser + " at a Chromium or Chrome binary."

// Timeout bounds a Browser's whole life, StepTimeout each call of its
// methods (a navigation, a wait for a selector): a hung browser fails the
// test instead of hanging CI.
const (
	Timeout     = 2 * time.Minute
	StepTimeout = 30 * time.Second
)

// Browser is one headless Chromium with one tab, for one test: made with
// New, killed at cleanup. Its methods fail the test on any error.
type Browser struct {
	ctx       context.Context // the tab's: ends at cleanup or after Timeout
	mainFrame cdp.FrameID     // the tab's top frame, whose id is the target's

	mu         sync.Mutex
	dialogs    []string
	console    []string
	consoleAPI int // console API calls: only a script makes them
	exceptions []string
	csp        []string
	status     int
	loading    bool          // the top frame is navigating
	changed    chan struct{} // closed, and replaced, whenever loading changes
}

// New starts a headless Chromium for t, with a fresh profile, no sandbox
// (tests run as root), no GPU and a 1280×900 window; it is killed at
// cleanup, or after Timeout.
func New(t testing.TB) *Browser {
	t.Helper()
	exe := find(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	life, cancelLife := context.WithTimeout(context.Background(), Timeout)
	alloc, cancelAlloc := chromedp.NewExecAllocator(life, opts...)
	b := &Browser{changed: make(chan struct{})}
	ctx, cancelTab := chromedp.NewContext(alloc, chromedp.WithListener(b.record))
	b.ctx = ctx
	dismissed := make(chan struct{})
	t.Cleanup(func() {
		cancelTab() // waits for the browser to exit
		cancelAlloc()
		cancelLife()
		<-dismissed
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, opens the tab
		close(dismissed)
		t.Fatalf("starting %s: %v\n%s", exe, err, howToInstall)
	}
	b.mu.Lock()
	b.mainFrame = cdp.FrameID(chromedp.FromContext(ctx).Target.TargetID)
	b.mu.Unlock()
	// A dialog stops the page until answered: dismiss each one (confirm
	// answers false, prompt null); record notes it.
	opening := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		defer close(dismissed)
		for _, err := range opening {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{})
		}
	}()
	return b
}

// find returns the browser to run, or fails t saying what to install.
func find(t testing.TB) string {
	t.Helper()
	if name := os.Getenv(EnvBrowser); name != "" {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s=%s: %v\n%s", EnvBrowser, name, err, howToInstall)
		}
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatalf("no browser on the PATH (looked for chromium, chromium-browser, google-chrome)\n%s", howToInstall)
	return ""
}

// record keeps what t needs of an event. chromedp calls it in order, on
// the goroutine that reads the tab's messages: it must return at once.
func (b *Browser) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *page.EventJavascriptDialogOpening:
		b.dialogs = append(b.dialogs, string(ev.Type)+": "+ev.Message)
	case *runtime.EventConsoleAPICalled:
		b.consoleAPI++
		b.log(string(ev.Type), argsText(ev.Args))
	case *runtime.EventExceptionThrown:
		b.exceptions = append(b.exceptions, exceptionText(ev.ExceptionDetails))
	case *log.EventEntryAdded:
		b.log(string(ev.Entry.Level), ev.Entry.Text)
	case *network.EventResponseReceived:
		if ev.Type == network.ResourceTypeDocument && ev.FrameID == b.mainFrame {
			b.status = int(ev.Response.Status)
		}
	case *page.EventFrameRequestedNavigation:
		b.setLoading(ev.FrameID, true)
	case *page.EventFrameStartedLoading:
		b.setLoading(ev.FrameID, true)
	case *page.EventFrameStoppedLoading:
		b.setLoading(ev.FrameID, false)
	}
}

// log records a console message; b.mu is held.
func (b *Browser) log(level, text string) {
	b.console = append(b.console, level+": "+text)
	if strings.Contains(text, "Content Security Policy") {
		b.csp = append(b.csp, text)
	}
}

// setLoading notes that the top frame started or stopped navigating; b.mu
// is held.
func (b *Browser) setLoading(frame cdp.FrameID, loading bool) {
	if frame != b.mainFrame || b.loading == loading {
		return
	}
	b.loading = loading
	close(b.changed)
	b.changed = make(chan struct{})
}

// argsText is a console call's arguments as the DevTools console shows
// them, roughly: strings as they are, other values as JSON or described.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		var s string
		switch {
		case len(a.Value) > 0 && json.Unmarshal(a.Value, &s) == nil:
		case len(a.Value) > 0:
			s = string(a.Value)
		case a.Description != "":
			s = a.Description
		default:
			s = string(a.Type)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// exceptionText is an uncaught exception's text ("Uncaught") and the
// thrown value ("Error: boom" and its stack).
func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return ""
	}
	text := d.Text
	if e := d.Exception; e != nil {
		if e.Description != "" {
			text += " " + e.Description
		} else if len(e.Value) > 0 {
			text += " " + string(e.Value)
		}
	}
	return text
}

// Dialogs returns the dialogs pages opened, "alert: message" each (type,
// then message); every one was dismissed.
func (b *Browser) Dialogs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.dialogs)
}

// ConsoleMessages returns what reached the console, "level: text" each:
// console API calls ("log: …", "error: …") and the browser's own entries,
// among them failed loads and Content-Security-Policy violations
// ("error: Executing inline script violates the following Content
// Security Policy directive …").
func (b *Browser) ConsoleMessages() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.console)
}

// CSPViolations returns the console messages reporting a
// Content-Security-Policy violation, their text alone.
func (b *Browser) CSPViolations() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.csp)
}

// Exceptions returns the uncaught exceptions scripts threw.
func (b *Browser) Exceptions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.exceptions)
}

// NoScriptRan fails t if a page opened a dialog, threw an exception or
// called the console API: each means a script ran.
func (b *Browser) NoScriptRan(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 || len(b.exceptions) > 0 || b.consoleAPI > 0 {
		t.Errorf("a script ran: dialogs %q, exceptions %q, %d console API calls; console:\n%s",
			b.dialogs, b.exceptions, b.consoleAPI, strings.Join(b.console, "\n"))
	}
}

// LastStatus returns the HTTP status of the last document the tab loaded
// (0 before any): after a form's POST, the status the server answered it.
func (b *Browser) LastStatus() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status
}

// run runs a on the tab within StepTimeout, failing t with what on error.
func run[T any](t testing.TB, b *Browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("browser: %s: gave up after %s (or the browser's %s ran out): %v", what, StepTimeout, Timeout, err)
	}
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// Run runs actions on the tab, in order, within StepTimeout.
func (b *Browser) Run(t testing.TB, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	run(t, b, "running actions", chromedp.Steps(actions...))
}

// Navigate loads url in the tab and waits for it to load.
func (b *Browser) Navigate(t testing.TB, url string) {
	t.Helper()
	run(t, b, "navigating to "+url, chromedp.Navigate(url))
}

// Text returns the visible text of the first node that the CSS selector
// matches, waiting for it to be visible.
func (b *Browser) Text(t testing.TB, selector string) string {
	t.Helper()
	return run(t, b, "waiting for "+selector+" to be visible", chromedp.Text(chromedp.CSS(selector), chromedp.NodeVisible))
}

// Exists reports whether the CSS selector matches a node now, without
// waiting for one.
func (b *Browser) Exists(t testing.TB, selector string) bool {
	t.Helper()
	nodes := run(t, b, "looking for "+selector, chromedp.Nodes(chromedp.CSSAll(selector), chromedp.AtLeast(0)))
	return len(nodes) > 0
}

// Click clicks the first node that the CSS selector matches, once it is
// visible, as a mouse does; when that navigates (a link, a form's submit
// button), it waits for the new page to load.
func (b *Browser) Click(t testing.TB, selector string) {
	t.Helper()
	run(t, b, "clicking "+selector, chromedp.Click(chromedp.CSS(selector)))
	b.settle(t, "clicking "+selector)
}

// SetValue sets the value of the first input, textarea or select that the
// CSS selector matches, as a whole (no key events).
func (b *Browser) SetValue(t testing.TB, selector, value string) {
	t.Helper()
	run(t, b, "setting "+selector, chromedp.SetValue(chromedp.CSS(selector), value))
}

// SendKeys types keys into the first node that the CSS selector matches,
// once it is visible; when that navigates ("\r" in a form's field), it
// waits for the new page to load.
func (b *Browser) SendKeys(t testing.TB, selector, keys string) {
	t.Helper()
	run(t, b, "typing into "+selector, chromedp.SendKeys(chromedp.CSS(selector), keys))
	b.settle(t, "typing into "+selector)
}

// Submit submits the form of the first node that the CSS selector matches
// (form.submit(): no submit button, no validation) and waits for the page
// it answers with to load.
func (b *Browser) Submit(t testing.TB, selector string) {
	t.Helper()
	run(t, b, "submitting "+selector, chromedp.Submit(chromedp.CSS(selector)))
	b.settle(t, "submitting "+selector)
}

// settle waits for a navigation that the action just done started to
// finish loading. A page asks to navigate (a click on a link or a submit
// button, form.submit()) before it answers the action, so after one more
// round trip to the page the request has been recorded.
func (b *Browser) settle(t testing.TB, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	_, _ = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void]("0"))
	for {
		b.mu.Lock()
		loading, changed := b.loading, b.changed
		b.mu.Unlock()
		if !loading {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("browser: %s: the page it navigated to did not load: %v", what, ctx.Err())
		}
	}
}

// Location returns the tab's URL.
func (b *Browser) Location(t testing.TB) string {
	t.Helper()
	return run(t, b, "reading the location", chromedp.Location())
}

// HTML returns the outer HTML of the document (its html element).
func (b *Browser) HTML(t testing.TB) string {
	t.Helper()
	return run(t, b, "reading the HTML", chromedp.OuterHTML(chromedp.CSS("html")))
}

// Screenshot writes a PNG of the whole page, beyond the window, to path,
// making its directory.
func (b *Browser) Screenshot(t testing.TB, path string) {
	t.Helper()
	png := run(t, b, "taking a screenshot", chromedp.FullScreenshot(100)) // 100: PNG; less is JPEG
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
