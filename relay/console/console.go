package console

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// PrefixDefault is where the console is mounted unless Config.Prefix says
// otherwise.
const PrefixDefault = "/console"

// PreviewBytes is the most of a payload a page shows.
const PreviewBytes = 4096

// pageTimeout bounds the database work of one page or action.
const pageTimeout = 10 * time.Second

// MinSecretLength is the shortest Config.Secret New accepts.
const MinSecretLength = 16

// Outbox is one outbox the console shows.
type Outbox struct {
	// Tenant names the outbox's database in a many-outbox relay
	// (RELAY_TENANTS_FILE); empty for a relay of one database.
	Tenant string
	// Database names the database for people (host and database name,
	// never a password): outboxes of one database share its horizon.
	Database string
	Schema   string
	// Admin reads and changes the outbox; nil when Err says why it cannot.
	Admin *admin.Admin
	// Err is why the outbox cannot be read (its database is unreachable,
	// its schema is not an outbox); the overview shows it on the
	// outbox's line.
	Err error
}

// Config configures a Handler.
type Config struct {
	// Outboxes lists the outboxes to show, called once per page: the
	// outboxes a schema pattern matches may change while the console runs.
	Outboxes func(ctx context.Context) []Outbox
	// Secret turns actions on: the operator signs in with it. Empty: the
	// console is read-only. At least MinSecretLength bytes.
	Secret string
	// DefaultSink names the destination of rows without one (RELAY_SINK).
	DefaultSink string
	// Prefix is the path the console is mounted under; default
	// PrefixDefault.
	Prefix string
	// Log receives the audit lines of actions and the errors of pages;
	// default slog.Default().
	Log *slog.Logger
	// Served says what serves the console, for the pages' footer: "relay"
	// or "outbox-relay console".
	Served string
}

// Handler serves the console's pages under Config.Prefix.
type Handler struct {
	cfg   Config
	mux   *http.ServeMux
	pages map[string]*template.Template
	csrf  *http.CrossOriginProtection
	// signins limits sign-in attempts (signinLimiter).
	signins signinLimiter
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets/console.css
var stylesheet []byte

// New returns the console's handler. It refuses a secret shorter than
// MinSecretLength.
func New(cfg Config) (*Handler, error) {
	if cfg.Outboxes == nil {
		return nil, errors.New("console: Config.Outboxes is nil")
	}
	if cfg.Secret != "" && len(cfg.Secret) < MinSecretLength {
		return nil, fmt.Errorf("console: the secret is %d bytes; at least %d are needed", len(cfg.Secret), MinSecretLength)
	}
	cfg.Prefix = strings.TrimRight(cmp.Or(cfg.Prefix, PrefixDefault), "/")
	cfg.Log = cmp.Or(cfg.Log, slog.Default())
	cfg.DefaultSink = cmp.Or(cfg.DefaultSink, admin.DefaultSinkLabel)
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, pages: pages, csrf: http.NewCrossOriginProtection()}
	h.csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.refuse(w, r, http.StatusForbidden, "This request came from another site (Sec-Fetch-Site or Origin say so); the console refuses it.")
	}))
	h.routes()
	return h, nil
}

// contentSecurityPolicy lets pages load the console's stylesheet and
// nothing else: no script, no frame, no form posting elsewhere.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP serves a console page with its security headers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// ActionsEnabled reports whether the console offers actions (a secret is
// set).
func (h *Handler) ActionsEnabled() bool { return h.cfg.Secret != "" }

func serveStylesheet(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	_, _ = w.Write(stylesheet)
}

// findOutbox returns the outbox the request's path names ({tenant},
// {schema}; the tenant "-" is none), or answers 404 and returns false.
func (h *Handler) findOutbox(w http.ResponseWriter, r *http.Request) (Outbox, bool) {
	tenant, schema := r.PathValue("tenant"), r.PathValue("schema")
	if tenant == noTenant {
		tenant = ""
	}
	for _, o := range h.cfg.Outboxes(r.Context()) {
		if o.Tenant == tenant && o.Schema == schema {
			if o.Admin == nil {
				h.refuse(w, r, http.StatusBadGateway, "This outbox cannot be read: "+errorText(o.Err))
				return o, false
			}
			return o, true
		}
	}
	h.refuse(w, r, http.StatusNotFound, "No outbox "+schema+" is configured"+tenantSuffix(tenant)+".")
	return Outbox{}, false
}

// noTenant stands for the empty tenant in paths.
const noTenant = "-"

func tenantSuffix(tenant string) string {
	if tenant == "" {
		return ""
	}
	return " for tenant " + tenant
}

// errorText is err's text, or "unknown error".
func errorText(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}

// pageContext bounds a page's database work.
func pageContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), pageTimeout)
}
