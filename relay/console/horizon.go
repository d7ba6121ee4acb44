package console

import (
	"net/http"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// databaseHorizon is the horizon of one database and the outboxes in it.
type databaseHorizon struct {
	Database string
	Outboxes []Outbox
	Horizon  admin.HorizonStatus
	Err      string
}

// horizon shows, per database, the sessions holding the oldest snapshot
// or transaction id: what keeps vacuum from removing the dead rows that
// every delivery leaves.
func (h *Handler) horizon(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := pageContext(r)
	defer cancel()
	var dbs []*databaseHorizon
	byName := map[string]*databaseHorizon{}
	for _, o := range h.cfg.Outboxes(ctx) {
		d := byName[o.Database]
		if d == nil {
			d = &databaseHorizon{Database: o.Database}
			byName[o.Database] = d
			dbs = append(dbs, d)
		}
		d.Outboxes = append(d.Outboxes, o)
	}
	for _, d := range dbs {
		var reader *admin.Admin
		for _, o := range d.Outboxes {
			if o.Admin != nil {
				reader = o.Admin
				break
			}
		}
		if reader == nil {
			d.Err = "no outbox of this database can be read: " + errorText(d.Outboxes[0].Err)
			continue
		}
		hs, err := reader.Horizon(ctx)
		if err != nil {
			d.Err = err.Error()
			continue
		}
		d.Horizon = hs
	}
	h.render(w, r, "horizon", h.newPage(r, "Horizon", nil, dbs))
}
