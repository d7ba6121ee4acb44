package console

import (
	"net/http"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// outboxPage shows one outbox in detail: its destinations, rows in
// backoff by error, blocked keys, relays and their buckets, leases,
// dead letters by reason, tables and the horizon of its database.
func (h *Handler) outboxPage(w http.ResponseWriter, r *http.Request) {
	o, ok := h.findOutbox(w, r)
	if !ok {
		return
	}
	ctx, cancel := pageContext(r)
	defer cancel()
	st, err := o.Admin.Status(ctx, admin.StatusOptions{DefaultSink: h.cfg.DefaultSink})
	if err != nil {
		h.failed(w, r, "read the outbox's status", err)
		return
	}
	h.render(w, r, "outbox", h.newPage(r, o.Schema, &o, st))
}
