package console

import "net/http"

// The console's pages and actions, under Config.Prefix: GET pages read,
// POST actions change (only with a secret, signed in: auth.go).

// routes registers every page and action.
func (h *Handler) routes() {
	p := h.cfg.Prefix
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+p+"/{$}", h.overview)
	mux.HandleFunc("GET "+p+"/assets/console.css", serveStylesheet)
	mux.HandleFunc("GET "+p+"/horizon", h.horizon)
	mux.HandleFunc("GET "+p+"/o/{tenant}/{schema}/{$}", h.outboxPage)
	mux.HandleFunc("GET "+p+"/o/{tenant}/{schema}/dead", h.deadGroups)
	mux.HandleFunc("GET "+p+"/o/{tenant}/{schema}/dead/letters", h.deadLetters)
	mux.HandleFunc("GET "+p+"/o/{tenant}/{schema}/dead/{id}", h.deadLetter)
	mux.HandleFunc("GET "+p+"/o/{tenant}/{schema}/key", h.keyHistory)
	mux.HandleFunc("GET "+p+"/signin", h.signinPage)
	mux.HandleFunc("POST "+p+"/signin", h.signin)
	mux.Handle("POST "+p+"/signout", h.action(h.signout))
	mux.Handle("POST "+p+"/o/{tenant}/{schema}/dead/retry", h.action(h.retryDead))
	mux.Handle("POST "+p+"/o/{tenant}/{schema}/dead/purge", h.action(h.purgeDead))
	mux.Handle("POST "+p+"/o/{tenant}/{schema}/cancel", h.action(h.cancelKey))
	mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		h.refuse(w, r, http.StatusNotFound, "No such page.")
	})
	h.mux = mux
}
