package console

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// How many dead-letter groups and letters a page lists.
const (
	groupsListed  = 50
	lettersListed = 200
)

// deadGroups shows the dead letters grouped by cause (reason and error),
// the most numerous first.
func (h *Handler) deadGroups(w http.ResponseWriter, r *http.Request) {
	o, ok := h.findOutbox(w, r)
	if !ok {
		return
	}
	ctx, cancel := pageContext(r)
	defer cancel()
	g, err := o.Admin.DeadGroups(ctx, groupsListed)
	if err != nil {
		h.failed(w, r, "group the dead letters", err)
		return
	}
	h.render(w, r, "deadgroups", h.newPage(r, "Dead letters", &o, g))
}

// letterSelection is a selection of dead letters in a page's query or an
// action's form: ids, or a group (reason and exact error), narrowed by
// topic or key.
type letterSelection struct {
	IDs     []int64
	Reason  string
	ErrorIs string
	Topic   string
	Key     string
	// asOf is a confirmation's dry-run time (asOfField): only letters
	// that had failed by then are taken. Zero outside a confirmation.
	asOf time.Time
}

// selectionOf reads a selection from r's form (query and body).
func selectionOf(r *http.Request) (letterSelection, error) {
	s := letterSelection{Reason: r.FormValue("reason"), ErrorIs: r.FormValue("error"), Topic: r.FormValue("topic"), Key: r.FormValue("key")}
	for _, v := range r.Form["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, errors.New("a selected id is not a number")
		}
		s.IDs = append(s.IDs, id)
	}
	return s, nil
}

// filter is the selection as admin's filter; a group's error is matched
// exactly, and a topic exactly (no pattern).
func (s letterSelection) filter() admin.DeadFilter {
	return admin.DeadFilter{IDs: s.IDs, Reason: s.Reason, ErrorIs: s.ErrorIs, Topic: escapeLike(s.Topic), Key: s.Key, Until: s.asOf}
}

// empty reports whether the selection selects nothing in particular.
func (s letterSelection) empty() bool {
	return len(s.IDs) == 0 && s.Reason == "" && s.ErrorIs == "" && s.Topic == "" && s.Key == ""
}

// escapeLike makes admin match topic exactly even when it holds % (which
// admin takes for a pattern): with the pattern's metacharacters escaped,
// the pattern matches only the topic itself.
func escapeLike(topic string) string {
	if topic == "" {
		return ""
	}
	out := make([]byte, 0, len(topic))
	for i := 0; i < len(topic); i++ {
		switch c := topic[i]; c {
		case '%', '_', '\\':
			out = append(out, '\\', c)
		default:
			out = append(out, c)
		}
	}
	return string(out)
}

// lettersData is what the letters page shows.
type lettersData struct {
	Selection letterSelection
	List      *admin.DeadList
}

// deadLetters lists the dead letters of a group (or selected by topic or
// key), oldest failure first, with a box to select each when actions are
// on.
func (h *Handler) deadLetters(w http.ResponseWriter, r *http.Request) {
	o, ok := h.findOutbox(w, r)
	if !ok {
		return
	}
	sel, err := selectionOf(r)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := pageContext(r)
	defer cancel()
	f := sel.filter()
	f.Limit = lettersListed
	list, err := o.Admin.ListDead(ctx, f)
	if err != nil {
		h.failed(w, r, "list the dead letters", err)
		return
	}
	h.render(w, r, "deadletters", h.newPage(r, "Dead letters", &o, lettersData{Selection: sel, List: list}))
}

// deadLetter shows one dead letter: its row, headers, errors and a
// preview of its payload.
func (h *Handler) deadLetter(w http.ResponseWriter, r *http.Request) {
	o, ok := h.findOutbox(w, r)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		h.refuse(w, r, http.StatusNotFound, "No such dead letter.")
		return
	}
	ctx, cancel := pageContext(r)
	defer cancel()
	d, err := o.Admin.DeadLetter(ctx, id, PreviewBytes)
	if errors.Is(err, admin.ErrNotFound) {
		h.refuse(w, r, http.StatusNotFound, "No dead letter "+strconv.FormatInt(id, 10)+" (retried or purged since?).")
		return
	}
	if err != nil {
		h.failed(w, r, "read the dead letter", err)
		return
	}
	h.render(w, r, "deadletter", h.newPage(r, "Dead letter "+strconv.FormatInt(id, 10), &o, d))
}
