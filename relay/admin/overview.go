package admin

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Defaults and bounds for OverviewOptions.
const (
	OverviewMinutesDefault = 60
	// OverviewMinutesMax is a week, RELAY_ARCHIVE_RETENTION's default:
	// the archive holds no deliveries older than that unless told to.
	OverviewMinutesMax = 7 * 24 * 60
)

// OverviewOptions configures Overview. Zero values take the documented
// defaults.
type OverviewOptions struct {
	// DefaultSink names the destination of rows whose destination is null
	// (RELAY_SINK), as StatusOptions.DefaultSink does. Default
	// DefaultSinkLabel. Overview sums every destination, so no name it
	// returns shows it.
	DefaultSink string
	// Minutes is how many minutes, this one included, DeliveredPerMinute
	// covers. Default OverviewMinutesDefault; more than OverviewMinutesMax
	// is cut to it.
	Minutes int
}

// Overview is what a console's front page shows of one outbox: the hot
// table in a few numbers, the dead letters, the relays, and the
// deliveries of the last minutes, read in one transaction.
type Overview struct {
	// At is the database's clock when the snapshot was taken; ages are
	// measured from it.
	At time.Time `json:"at"`
	// Mode is the delivery mode of the schema's relays.
	Mode outbox.Mode `json:"mode"`
	// Messages sums the hot table over every destination (its Destination
	// is empty), with StatusReport's definitions: its backlog (Due) and the
	// age of its oldest due row, the rows in flight, in backoff, delayed
	// and (ordered mode) waiting for an older row of their key.
	Messages DestinationStatus `json:"messages"`
	// DeadLetters counts the dead letters.
	DeadLetters int64 `json:"dead_letters"`
	// RelaysAlive counts the relays seen within 30 seconds (they record a
	// heartbeat every 10), of the Relays registered on the schema.
	RelaysAlive int `json:"relays_alive"`
	Relays      int `json:"relays"`
	// DeliveredPerMinute counts the rows archived in each of the last
	// OverviewOptions.Minutes minutes, oldest first, this one (not yet
	// over) last.
	DeliveredPerMinute []MinuteCount `json:"delivered_per_minute"`
	// DeliveredInWindow is the sum of DeliveredPerMinute's Delivered: the
	// rows sent (not the duplicates archived unsent) within those minutes.
	DeliveredInWindow int64 `json:"delivered_in_window"`
}

// Overview reads what a console's front page shows of the outbox, cheaply:
// a handful of statements in one read-only transaction, the schema's mode
// first and the rest in one round trip (as Status, without the listings).
// The hot table and the dead letters are scanned; the archive is read
// from the window's first minute on, through its delivered_at index.
func (a *Admin) Overview(ctx context.Context, opts OverviewOptions) (*Overview, error) {
	opts.DefaultSink = cmp.Or(opts.DefaultSink, DefaultSinkLabel)
	if opts.Minutes <= 0 {
		opts.Minutes = OverviewMinutesDefault
	}
	opts.Minutes = min(opts.Minutes, OverviewMinutesMax)
	ov := &Overview{DeliveredPerMinute: []MinuteCount{}}
	var (
		destinations []DestinationStatus
		relays       []RelayStatus
		byReason     []CountSince
	)
	err := inTx(ctx, a.db, readOnly, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, a.q.relayMode)
		mode, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[schemaMode])
		if err != nil {
			return fmt.Errorf("read the schema's mode: %w", err)
		}
		ov.At, ov.Mode = mode.At, mode.Mode
		b := &pgx.Batch{}
		collect(b, &destinations, "hot table summary", a.q.messagesStatus,
			pgx.StrictNamedArgs{"default_sink": opts.DefaultSink, "ordered": ov.Mode == outbox.ModeOrdered})
		collect(b, &byReason, "dead letters by reason", a.q.deadLettersByReason)
		collect(b, &relays, "relays", a.q.relaysStatus, pgx.StrictNamedArgs{"alive": relayAliveFor})
		collect(b, &ov.DeliveredPerMinute, "deliveries per minute", a.q.deliveredPerMinute, pgx.StrictNamedArgs{"minutes": opts.Minutes})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("read the overview: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	dueAges(ov.At, destinations)
	ov.Messages = (&StatusReport{Destinations: destinations}).Total()
	for _, c := range byReason {
		ov.DeadLetters += c.Count
	}
	ov.Relays = len(relays)
	for _, r := range relays {
		if r.Alive {
			ov.RelaysAlive++
		}
	}
	for _, m := range ov.DeliveredPerMinute {
		ov.DeliveredInWindow += m.Delivered
	}
	return ov, nil
}
