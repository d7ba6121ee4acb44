package console

import (
	"net/http"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// keyRows is how many of a key's rows the key page lists, the newest.
const keyRows = 200

// keyData is what the key page shows.
type keyData struct {
	Key     string
	History *admin.KeyHistory
	// Pending counts the key's rows still in the hot table, which a
	// cancel would move to the dead letters.
	Pending int
}

// keyHistory shows a key's rows in order, wherever each is now: pending
// in the hot table, delivered or deduplicated in the archive, or a dead
// letter. "What happened to order 42."
func (h *Handler) keyHistory(w http.ResponseWriter, r *http.Request) {
	o, ok := h.findOutbox(w, r)
	if !ok {
		return
	}
	key := r.URL.Query().Get("key")
	data := keyData{Key: key}
	if key != "" {
		ctx, cancel := pageContext(r)
		defer cancel()
		hist, err := o.Admin.KeyHistory(ctx, key, keyRows)
		if err != nil {
			h.failed(w, r, "read the key's rows", err)
			return
		}
		data.History = hist
		for _, row := range hist.Rows {
			switch row.Where {
			case admin.KeyDelivered, admin.KeyDeduplicated, admin.KeyDead:
			default:
				data.Pending++
			}
		}
	}
	h.render(w, r, "key", h.newPage(r, "Key", &o, data))
}
