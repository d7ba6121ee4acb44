package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/keychain"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// The outcome vocabulary: what can become of a claimed row, how a sink's
// answer is judged, and how outcomes are labelled in
// outbox_relay_messages_total.

// maxErrorLen bounds the error text stored with a row.
const maxErrorLen = 2000

type outcomeKind uint8

const (
	kindDelivered outcomeKind = iota // archive and record the key
	kindDuplicate                    // archive without sending: key already delivered
	kindRetry                        // requeue after delay, attempt counted
	kindRelease                      // requeue now, attempt given back (shutdown)
	kindDead                         // move to the dead letters
)

// rowOutcome is what became of one claimed row; the settler writes it down.
type rowOutcome struct {
	id      int64
	seq     int32 // the claim's claim_seq: the settle's guard
	attempt int
	sink    string
	size    int // payload bytes, held in memory until settled
	kind    outcomeKind
	delay   time.Duration // kindRetry
	reason  string        // kindDead
	err     string        // kindRetry, kindDead
	// The row's key, bucket, and the epoch it was claimed under (the
	// settle's fence, where rows are claimed by bucket).
	key    string
	keyed  bool // the row has a key, the empty one included
	bucket int32
	epoch  int64
	// link is the row's link in its key's chain (nil in the modes that
	// keep none), forgotten once settled.
	link *keychain.Link
}

// unknownSink groups the rows whose destination names no configured sink;
// it is their label in metrics, so that row data cannot create series.
const unknownSink = "(unknown)"

// Outcome labels of outbox_relay_messages_total.
const (
	outcomeDelivered    = "delivered"
	outcomeRetried      = "retried"
	outcomeDeadLettered = "dead_lettered"
	outcomeDeduplicated = "deduplicated"
	outcomeReleased     = "released"
)

// outcomeLabels lists every outcome label, so that each series exists from
// the start.
var outcomeLabels = []string{outcomeDelivered, outcomeRetried, outcomeDeadLettered, outcomeDeduplicated, outcomeReleased}

// passesKey reports whether an outcome of kind k lets the rows of its key
// behind it go (keychain.Resolve): delivered, a duplicate, or
// dead-lettered, which ends its hold on the key; a retried or released row
// holds them.
func passesKey(k outcomeKind) bool {
	return k == kindDelivered || k == kindDuplicate || k == kindDead
}

// outcomeLabel is the metric label of kind k.
func outcomeLabel(k outcomeKind) string {
	switch k {
	case kindDelivered:
		return outcomeDelivered
	case kindDuplicate:
		return outcomeDeduplicated
	case kindRetry:
		return outcomeRetried
	case kindRelease:
		return outcomeReleased
	default:
		return outcomeDeadLettered
	}
}

// claimTag is what a row's settle must present of the claim that leased
// it: its claim_seq, and where rows are claimed by bucket, the bucket and
// the epoch the relay owned it under; and whether the row has a key (in
// ordered mode, the settle of a keyed row makes its key's next row a
// candidate).
type claimTag struct {
	seq    int32
	bucket int32
	epoch  int64
	keyed  bool
	// self and prev are the row's link in its key's chain and the link it
	// follows (claimedRow).
	self, prev *keychain.Link
}

// newOutcome returns the outcome of m, claimed under t, for sink, without
// its kind.
func newOutcome(m *sinks.Message, t claimTag, sink string) rowOutcome {
	return rowOutcome{id: m.ID, seq: t.seq, attempt: m.Attempt, sink: sink, size: len(m.Payload),
		key: m.Key, keyed: t.keyed, bucket: t.bucket, epoch: t.epoch, link: t.self}
}

// errorText is err as it is stored with a row: valid UTF-8 without NUL
// bytes (PostgreSQL text refuses both), at most maxErrorLen bytes.
func errorText(err error) string {
	s := err.Error()
	truncated := len(s) > maxErrorLen
	if truncated {
		s = s[:maxErrorLen]
	}
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
	if truncated {
		s += "…"
	}
	return s
}

// outcomeOf classifies the result err of delivering m under claim t, with
// cfg's attempts and backoff.
func outcomeOf(cfg *Config, m *sinks.Message, t claimTag, sink string, err error, shuttingDown bool) rowOutcome {
	o := newOutcome(m, t, sink)
	switch {
	case err == nil:
		o.kind = kindDelivered
	case sinks.IsPermanent(err):
		o.kind, o.reason, o.err = kindDead, outbox.ReasonPermanent, errorText(err)
	case shuttingDown && (errors.Is(err, context.Canceled) || followsFailed(err)):
		// Claimable again at once, by any relay (a row left unsent behind
		// another follows that one, which is released at once too).
		o.kind = kindRelease
	case errors.Is(err, sinks.ErrNotAttempted):
		// The sink did not try (paused, disconnected, out of time): back
		// without spending an attempt, after a pause, so that a sink that
		// keeps refusing does not turn claims into a busy loop.
		o.kind, o.delay = kindRelease, cfg.BackoffMin
	case m.Attempt >= cfg.MaxAttempts:
		o.kind, o.reason = kindDead, outbox.ReasonExhausted
		o.err = fmt.Sprintf("after %d attempts: %s", m.Attempt, errorText(err))
	default:
		o.kind, o.err = kindRetry, errorText(err)
		o.delay = backoffDelay(m.Attempt, cfg.BackoffMin, cfg.BackoffMax)
		if after, ok := sinks.RetryDelay(err); ok && after > o.delay {
			o.delay = after
		}
	}
	return o
}
