package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// confirmation is what an action's first step shows: what would change,
// and the form that changes it.
type confirmation struct {
	// Action is the path the confirm form posts to; Verb says what it does.
	Action string
	Verb   string
	// What describes the selection; Count how many rows it would change,
	// Detail what else the dry run found.
	What   string
	Count  int64
	Detail string
	// Fields are the form's hidden fields, repeated with confirm=yes.
	Fields [][2]string
	// Done is set once the action ran; Result says what it did.
	Done   bool
	Result string
	// Back is where to go afterwards.
	Back string
}

// confirmed reports whether the form carries confirm=yes (the second
// step).
func confirmed(r *http.Request) bool { return r.PostFormValue("confirm") == "yes" }

// asOfField is the confirm form's field that carries the dry run's
// database time: the confirmed action takes only the dead letters that
// had failed by then, the ones the dry run counted, not those that failed
// while the operator read the count.
const asOfField = "as_of"

// dryRunAsOf returns the dry run's time a confirm form carries, refusing a
// form without one.
func dryRunAsOf(r *http.Request) (time.Time, error) {
	at, err := time.Parse(time.RFC3339Nano, r.PostFormValue(asOfField))
	if err != nil {
		return time.Time{}, errors.New("This confirmation does not say when its dry run counted the dead letters: start again from the dead letters.")
	}
	return at, nil
}

// bindDryRun makes a dry run's confirm form carry its time (asOfField);
// a done action's page has no form.
func (c *confirmation) bindDryRun(asOf time.Time) {
	if !c.Done {
		c.Fields = append(c.Fields, [2]string{asOfField, asOf.Format(time.RFC3339Nano)})
	}
}

// selectionFields returns the hidden fields that repeat s.
func selectionFields(s letterSelection) [][2]string {
	var f [][2]string
	for _, id := range s.IDs {
		f = append(f, [2]string{"id", strconv.FormatInt(id, 10)})
	}
	for _, kv := range [][2]string{{"reason", s.Reason}, {"error", s.ErrorIs}, {"topic", s.Topic}, {"key", s.Key}} {
		if kv[1] != "" {
			f = append(f, kv)
		}
	}
	return f
}

// describe says in words what s selects.
func (s letterSelection) describe() string {
	var parts []string
	if len(s.IDs) > 0 {
		parts = append(parts, fmt.Sprintf("%d selected dead letters", len(s.IDs)))
	}
	if s.Reason != "" {
		parts = append(parts, "reason "+s.Reason)
	}
	if s.ErrorIs != "" {
		parts = append(parts, "error “"+show(s.ErrorIs)+"”")
	}
	if s.Topic != "" {
		parts = append(parts, "topic "+show(s.Topic))
	}
	if s.Key != "" {
		parts = append(parts, "key "+show(s.Key))
	}
	return strings.Join(parts, ", ")
}

// letterAction reads the selection of a dead-letter action, refusing an
// empty one (an action never takes every dead letter from the console),
// and a confirmation that does not carry its dry run's time.
func (h *Handler) letterAction(w http.ResponseWriter, r *http.Request) (Outbox, letterSelection, bool) {
	o, ok := h.findOutbox(w, r)
	if !ok {
		return o, letterSelection{}, false
	}
	sel, err := selectionOf(r)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, err.Error())
		return o, sel, false
	}
	if sel.empty() {
		h.refuse(w, r, http.StatusBadRequest, "Select dead letters first: tick some, or act on a group.")
		return o, sel, false
	}
	if confirmed(r) {
		if sel.asOf, err = dryRunAsOf(r); err != nil {
			h.refuse(w, r, http.StatusBadRequest, err.Error())
			return o, sel, false
		}
	}
	return o, sel, true
}

// retryDead retries the selected dead letters: a dry run first, then, with
// confirm=yes, the retry.
func (h *Handler) retryDead(w http.ResponseWriter, r *http.Request) {
	o, sel, ok := h.letterAction(w, r)
	if !ok {
		return
	}
	ctx, cancel := pageContext(r)
	defer cancel()
	c := confirmation{Action: outboxPath(h.cfg.Prefix, o) + "dead/retry", Verb: "Retry", What: sel.describe(),
		Fields: selectionFields(sel), Back: outboxPath(h.cfg.Prefix, o) + "dead"}
	res, err := o.Admin.RetryDead(ctx, admin.RetryDeadOptions{DeadFilter: sel.filter(), DryRun: !confirmed(r)})
	if err != nil {
		h.failed(w, r, "retry the dead letters", err)
		return
	}
	c.Count = res.Retried
	c.Detail = retryDetail(res)
	if confirmed(r) {
		c.Done = true
		c.Result = fmt.Sprintf("Retried %d dead letters: they are back in the hot table, due now.", res.Retried)
		h.audit(ctx, r, o, "retry dead letters", sel.describe(), "retried", res.Retried, "skipped_pending", res.SkippedPending,
			"skipped_delivered", res.SkippedDelivered, "refused", len(res.Refused))
	}
	c.bindDryRun(res.AsOf)
	h.render(w, r, "confirm", h.newPage(r, c.Verb, &o, c))
}

// retryDetail says what a retry leaves where it is, and why.
func retryDetail(res admin.RetryDeadResult) string {
	var parts []string
	if res.SkippedPending > 0 {
		parts = append(parts, fmt.Sprintf("%d stay: a row with their idempotency key is pending", res.SkippedPending))
	}
	if res.SkippedDelivered > 0 {
		parts = append(parts, fmt.Sprintf("%d stay: their idempotency key was delivered already", res.SkippedDelivered))
	}
	for _, ref := range res.Refused {
		parts = append(parts, fmt.Sprintf("%d stays: the hot table refuses it (%s)", ref.ID, show(ref.Reason)))
	}
	return strings.Join(parts, "; ")
}

// purgeDead deletes the selected dead letters, after a dry run.
func (h *Handler) purgeDead(w http.ResponseWriter, r *http.Request) {
	o, sel, ok := h.letterAction(w, r)
	if !ok {
		return
	}
	ctx, cancel := pageContext(r)
	defer cancel()
	c := confirmation{Action: outboxPath(h.cfg.Prefix, o) + "dead/purge", Verb: "Purge", What: sel.describe(),
		Fields: selectionFields(sel), Back: outboxPath(h.cfg.Prefix, o) + "dead"}
	res, err := o.Admin.PurgeDead(ctx, admin.PurgeDeadOptions{DeadFilter: sel.filter(), DryRun: !confirmed(r)})
	if err != nil {
		h.failed(w, r, "purge the dead letters", err)
		return
	}
	c.Count = res.Purged
	if confirmed(r) {
		c.Done = true
		c.Result = fmt.Sprintf("Purged %d dead letters: they are deleted, and will not be delivered.", res.Purged)
		h.audit(ctx, r, o, "purge dead letters", sel.describe(), "purged", res.Purged)
	}
	c.bindDryRun(res.AsOf)
	h.render(w, r, "confirm", h.newPage(r, c.Verb, &o, c))
}

// cancelKey moves a key's pending rows to the dead letters (reason
// cancelled), after a dry run.
func (h *Handler) cancelKey(w http.ResponseWriter, r *http.Request) {
	o, ok := h.findOutbox(w, r)
	if !ok {
		return
	}
	key := r.PostFormValue("key")
	if key == "" {
		h.refuse(w, r, http.StatusBadRequest, "Name the key whose pending rows to cancel.")
		return
	}
	ctx, cancel := pageContext(r)
	defer cancel()
	c := confirmation{Action: outboxPath(h.cfg.Prefix, o) + "cancel", Verb: "Cancel", What: "the pending rows of key " + show(key),
		Fields: [][2]string{{"key", key}}, Back: outboxPath(h.cfg.Prefix, o) + "key?key=" + urlQuery(key)}
	res, err := o.Admin.Cancel(ctx, admin.CancelOptions{Key: key, DryRun: !confirmed(r)})
	if err != nil {
		h.failed(w, r, "cancel the key's rows", err)
		return
	}
	c.Count = res.Cancelled
	if res.InFlight > 0 {
		c.Detail = fmt.Sprintf("%d in flight stay: a relay may be delivering them right now; cancel again once their lease ends", res.InFlight)
	}
	if confirmed(r) {
		c.Done = true
		c.Result = fmt.Sprintf("Cancelled %d rows: they are dead letters (reason cancelled); retrying them undoes the cancel.", res.Cancelled)
		h.audit(ctx, r, o, "cancel pending rows", c.What, "cancelled", res.Cancelled, "in_flight", res.InFlight)
	}
	h.render(w, r, "confirm", h.newPage(r, c.Verb, &o, c))
}

// audit logs an action that changed rows: which outbox, what was done to
// what, the counts, and the client.
func (h *Handler) audit(ctx context.Context, r *http.Request, o Outbox, action, selection string, counts ...any) {
	args := []any{"action", action, "schema", o.Schema, "selection", selection, "client", r.RemoteAddr}
	if o.Tenant != "" {
		args = append(args, "tenant", o.Tenant)
	}
	h.cfg.Log.InfoContext(ctx, "console: "+action, append(args, counts...)...)
}
