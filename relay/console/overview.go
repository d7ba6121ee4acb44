package console

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// overviewMinutes is how far back the overview's deliveries go.
const overviewMinutes = 60

// overviewReaders bounds how many outboxes the overview reads at once.
const overviewReaders = 8

// stuckAfter is how old the oldest due row may be before the overview
// calls its outbox behind.
const stuckAfter = time.Minute

// overviewLine is one outbox on the overview.
type overviewLine struct {
	Outbox   Outbox
	Overview *admin.Overview
	Err      string
	// Problems say, in words, what needs looking at.
	Problems []string
	Bars     []bar
}

// overview shows every outbox: mode, backlog, dead letters, relays alive
// and deliveries over the last hour.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := pageContext(r)
	defer cancel()
	outboxes := h.cfg.Outboxes(ctx)
	lines := make([]overviewLine, len(outboxes))
	sem := make(chan struct{}, overviewReaders)
	var wg sync.WaitGroup
	for i, o := range outboxes {
		lines[i].Outbox = o
		if o.Admin == nil {
			lines[i].Err = errorText(o.Err)
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			lines[i] = h.overviewLine(ctx, o)
		})
	}
	horizons := map[string]string{}
	var mu sync.Mutex
	for _, o := range outboxes {
		if _, seen := horizons[o.Database]; seen || o.Admin == nil {
			continue
		}
		horizons[o.Database] = ""
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if held := heldHorizon(ctx, o); held != "" {
				mu.Lock()
				horizons[o.Database] = held
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i := range lines {
		if held := horizons[lines[i].Outbox.Database]; held != "" && lines[i].Overview != nil {
			lines[i].Problems = append(lines[i].Problems, held)
		}
	}
	h.render(w, r, "overview", h.newPage(r, "Outboxes", nil, lines))
}

// pinnedAfter is how long a session may hold the horizon before the
// overview says so.
const pinnedAfter = 5 * time.Minute

// heldHorizon says who holds the horizon of o's database, when a session
// has held it for pinnedAfter or more; "" otherwise.
func heldHorizon(ctx context.Context, o Outbox) string {
	hs, err := o.Admin.Horizon(ctx)
	if err != nil {
		return ""
	}
	oldest := hs.Oldest()
	if oldest == nil || *oldest.AgeSeconds < pinnedAfter.Seconds() {
		return ""
	}
	who := oldest.Holder
	if oldest.ApplicationName != "" {
		who = oldest.ApplicationName
	}
	return "horizon held " + age(*oldest.AgeSeconds) + " by " + show(who)
}

// overviewLine reads one outbox's line.
func (h *Handler) overviewLine(ctx context.Context, o Outbox) overviewLine {
	line := overviewLine{Outbox: o}
	ov, err := o.Admin.Overview(ctx, admin.OverviewOptions{DefaultSink: h.cfg.DefaultSink, Minutes: overviewMinutes})
	if err != nil {
		line.Err = err.Error()
		return line
	}
	line.Overview = ov
	counts := make([]int64, len(ov.DeliveredPerMinute))
	labels := make([]string, len(ov.DeliveredPerMinute))
	for i, m := range ov.DeliveredPerMinute {
		counts[i] = m.Delivered
		labels[i] = m.Minute.UTC().Format("15:04Z")
	}
	line.Bars = bars(counts, 3, labels)
	line.Problems = problems(ov)
	return line
}

// problems says what an on-call engineer should look at in an outbox.
func problems(ov *admin.Overview) []string {
	var out []string
	m := ov.Messages
	if ov.RelaysAlive == 0 && m.Pending > 0 {
		out = append(out, "no relay alive")
	} else if gone := ov.Relays - ov.RelaysAlive; gone > 0 {
		// A relay that stops cleanly leaves the registry: these died.
		out = append(out, fmt.Sprintf("%d %s not seen for 30s", gone, plural(gone, "relay", "relays")))
	}
	if m.Due > 0 && m.OldestDueAgeSeconds >= stuckAfter.Seconds() {
		out = append(out, "oldest due row waits "+age(m.OldestDueAgeSeconds))
	}
	if m.Backoff > 0 {
		out = append(out, "rows in backoff")
	}
	if ov.DeadLetters > 0 {
		out = append(out, "dead letters")
	}
	return out
}

// plural returns one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
