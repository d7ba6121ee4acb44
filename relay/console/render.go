package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// page is what every template receives: the layout's fields and the
// page's own Data.
type page struct {
	Title  string
	Prefix string
	// ReadOnly is set when no secret turns actions on; SignedIn when the
	// request carries a valid session (actions are offered); CSRF is the
	// form token of that session.
	ReadOnly bool
	SignedIn bool
	CSRF     string
	Served   string
	// Outbox is the outbox the page is about, for the breadcrumbs.
	Outbox *Outbox
	// Message is the text of an error page; Status its HTTP status.
	Message string
	Status  int
	Data    any
}

// OutboxPath is the path of the outbox's pages, under the prefix.
func (p page) OutboxPath() string {
	if p.Outbox == nil {
		return p.Prefix + "/"
	}
	return outboxPath(p.Prefix, *p.Outbox)
}

// outboxPath is the path of o's pages under prefix.
func outboxPath(prefix string, o Outbox) string {
	tenant := o.Tenant
	if tenant == "" {
		tenant = noTenant
	}
	return prefix + "/o/" + url.PathEscape(tenant) + "/" + url.PathEscape(o.Schema) + "/"
}

// parsePages parses every page template with the layout.
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, name := range names {
		base := path.Base(name)
		if base == "layout.html" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", name, err)
		}
		pages[strings.TrimSuffix(base, ".html")] = t
	}
	return pages, nil
}

// newPage returns the layout's fields for r.
func (h *Handler) newPage(r *http.Request, title string, o *Outbox, data any) page {
	p := page{Title: title, Prefix: h.cfg.Prefix, ReadOnly: h.cfg.Secret == "", Served: h.cfg.Served, Outbox: o, Data: data, Status: http.StatusOK}
	if s, ok := h.session(r); ok {
		p.SignedIn, p.CSRF = true, h.csrfToken(s)
	}
	return p
}

// render writes the page named name, or a 500 when it fails to render.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.cfg.Log.Error("console: render page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered; the relay's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(cmpStatus(p.Status))
	_, _ = w.Write(buf.Bytes())
}

func cmpStatus(s int) int {
	if s == 0 {
		return http.StatusOK
	}
	return s
}

// refuse answers with an error page saying message.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, message string) {
	p := h.newPage(r, http.StatusText(status), nil, nil)
	p.Message, p.Status = message, status
	h.render(w, r, "error", p)
}

// failed answers a page whose database work failed, and logs why.
func (h *Handler) failed(w http.ResponseWriter, r *http.Request, what string, err error) {
	h.cfg.Log.Warn("console: "+what, "path", show(r.URL.Path), "error", err)
	h.refuse(w, r, http.StatusBadGateway, "Could not "+what+": "+err.Error())
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"show":     show,
	"showFull": showFull,
	"preview":  preview,
	"when":     when,
	"age":      age,
	"since":    since,
	"bytes":    byteSize,
	"outbox":   outboxPath,
	"tenant":   func(t string) string { return cmpString(t, noTenant) },
	"bars":     bars,
	"add":      func(a, b int) int { return a + b },
}

func cmpString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// when formats t in UTC to the second; "–" for the zero time.
func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "–"
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if v == nil {
			return "–"
		}
		return when(*v)
	}
	return fmt.Sprint(t)
}

// age formats a number of seconds as a short duration ("3m12s").
func age(seconds any) string {
	var s float64
	switch v := seconds.(type) {
	case float64:
		s = v
	case *float64:
		if v == nil {
			return "unknown"
		}
		s = *v
	case time.Duration:
		s = v.Seconds()
	}
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	default:
		return fmt.Sprintf("%.1fd", d.Hours()/24)
	}
}

// since is how long before at t was ("3m12s ago"), or after it ("in 5s").
func since(at time.Time, t any) string {
	var v time.Time
	switch x := t.(type) {
	case time.Time:
		v = x
	case *time.Time:
		if x == nil {
			return "–"
		}
		v = *x
	}
	if v.IsZero() {
		return "–"
	}
	d := at.Sub(v)
	if d < 0 {
		return "in " + age(-d)
	}
	return age(d) + " ago"
}

// byteSize formats n bytes for people.
func byteSize(n any) string {
	var b float64
	switch v := n.(type) {
	case int:
		b = float64(v)
	case int64:
		b = float64(v)
	}
	switch {
	case b < 1<<10:
		return fmt.Sprintf("%.0f B", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	default:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	}
}

// urlQuery escapes s for a query string.
func urlQuery(s string) string { return url.QueryEscape(s) }
