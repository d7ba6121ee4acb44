package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SessionTTL is how long a sign-in lasts.
const SessionTTL = 8 * time.Hour

// sessionCookie names the session cookie.
const sessionCookie = "outbox_console_session"

// csrfField names the form token every action form carries.
const csrfField = "csrf"

// mac returns the HMAC-SHA256 of the parts under the secret, base64url.
func (h *Handler) mac(parts ...string) string {
	m := hmac.New(sha256.New, []byte(h.cfg.Secret))
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession returns a session cookie's value valid until expires:
// "<expiry unix seconds>.<mac>".
func (h *Handler) newSession(expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + h.mac("session", exp)
}

// session returns the request's session cookie when actions are on and
// the cookie is genuine and unexpired.
func (h *Handler) session(r *http.Request) (string, bool) {
	if h.cfg.Secret == "" {
		return "", false
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", false
	}
	exp, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return "", false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || time.Now().Unix() >= unix {
		return "", false
	}
	if !hmac.Equal([]byte(sig), []byte(h.mac("session", exp))) {
		return "", false
	}
	return c.Value, true
}

// csrfToken is the form token of session s.
func (h *Handler) csrfToken(s string) string { return h.mac("csrf", s) }

// action wraps an action's handler: it refuses every request while the
// console is read-only, then requests from other sites
// (CrossOriginProtection), then requests without a valid session or form
// token.
func (h *Handler) action(next http.HandlerFunc) http.Handler {
	checked := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.session(r)
		if !ok {
			h.refuse(w, r, http.StatusForbidden, "Sign in first: actions need the console's secret.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			h.refuse(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		if !hmac.Equal([]byte(r.PostFormValue(csrfField)), []byte(h.csrfToken(s))) {
			h.refuse(w, r, http.StatusForbidden, "The form's token is missing or stale: reload the page and try again.")
			return
		}
		next(w, r)
	})
	guarded := h.csrf.Handler(checked)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.Secret == "" {
			h.refuse(w, r, http.StatusForbidden, readOnlyText)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// readOnlyText says why a read-only console refuses an action.
const readOnlyText = "The console is read-only: actions are off. To turn them on, give the console a secret (RELAY_CONSOLE_SECRET_FILE) and sign in with it."

// maxFormBytes bounds an action's form (a selection of ids included).
const maxFormBytes = 1 << 20

func (h *Handler) signinPage(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Secret == "" {
		h.refuse(w, r, http.StatusNotFound, readOnlyText)
		return
	}
	h.render(w, r, "signin", h.newPage(r, "Sign in", nil, nil))
}

// signin checks the secret typed in the form and sets the session cookie.
// Cross-site sign-ins are refused, and failures slow down (signinLimiter).
func (h *Handler) signin(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Secret == "" {
		h.refuse(w, r, http.StatusForbidden, readOnlyText)
		return
	}
	if err := h.csrf.Check(r); err != nil {
		h.refuse(w, r, http.StatusForbidden, "This request came from another site; the console refuses it.")
		return
	}
	if !h.signins.allow(time.Now()) {
		h.refuse(w, r, http.StatusTooManyRequests, "Too many failed sign-ins: wait a minute.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("secret")), []byte(h.cfg.Secret)) != 1 {
		h.signins.failed(time.Now())
		h.cfg.Log.Warn("console: sign-in refused: wrong secret", "client", r.RemoteAddr)
		p := h.newPage(r, "Sign in", nil, nil)
		p.Message, p.Status = "That is not the console's secret.", http.StatusForbidden
		h.render(w, r, "signin", p)
		return
	}
	expires := time.Now().Add(SessionTTL)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: h.newSession(expires), Path: h.cfg.Prefix + "/",
		Expires: expires, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	h.cfg.Log.Info("console: signed in", "client", r.RemoteAddr)
	http.Redirect(w, r, h.cfg.Prefix+"/", http.StatusSeeOther)
}

func (h *Handler) signout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: h.cfg.Prefix + "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, h.cfg.Prefix+"/", http.StatusSeeOther)
}

// signinLimiter allows signinBurst failed sign-ins a minute, then refuses
// sign-ins until the minute has passed: guessing a secret of
// MinSecretLength bytes at that rate takes longer than anyone has.
type signinLimiter struct {
	mu       sync.Mutex
	window   time.Time
	failures int
}

const signinBurst = 10

func (l *signinLimiter) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Minute {
		l.window, l.failures = now, 0
	}
	return l.failures < signinBurst
}

func (l *signinLimiter) failed(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Minute {
		l.window, l.failures = now, 0
	}
	l.failures++
}
