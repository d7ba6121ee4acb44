package relay

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// Defaults for Config. They are the fast, safe choice measured on the
// benchmarks of docs/benchmarks.md.
const (
	BatchSizeDefault        = 1000
	PollIntervalDefault     = 50 * time.Millisecond
	LeaseDefault            = 30 * time.Second
	MaxAttemptsDefault      = 25
	BackoffMinDefault       = time.Second
	BackoffMaxDefault       = time.Hour
	DrainTimeoutDefault     = 10 * time.Second
	ArchiveRetentionDefault = 7 * 24 * time.Hour
	StatsIntervalDefault    = 10 * time.Second
	StallAfterDefault       = 30 * time.Second
	MaxInFlightBytesDefault = 64 << 20
	DedupRetentionDefault   = 7 * 24 * time.Hour
	HotRotationDefault      = time.Minute
)

// PoolSize is the number of connections a relay's pool should allow: its
// claimers (three in ordered mode), settlers, background queries and the
// RELAY_NOTIFY listener each hold one at times; with fewer, claims wait
// for a connection.
const PoolSize = 9

// Config configures a Relay. Zero values take the documented defaults.
type Config struct {
	// Schema holds the relay's tables (RELAY_SCHEMA). Default "outbox".
	Schema string
	// ID names this relay in leases (leased_by) and in the registry of
	// relays. Default hostname-pid.
	ID string
	// Version is the relay's version, recorded in the registry of relays.
	// Default "dev".
	Version string
	// Sinks maps destination names to sinks. At least one is required.
	Sinks map[string]sinks.Sink
	// DefaultSink receives rows whose destination is null (RELAY_SINK).
	// Default: the only sink, when there is exactly one.
	DefaultSink string
	// BatchSize is the number of rows per claim (RELAY_BATCH_SIZE). Default
	// BatchSizeDefault.
	BatchSize int
	// MaxInFlight bounds the rows claimed but not yet settled, per sink
	// (RELAY_MAX_IN_FLIGHT). Default 4 × BatchSize.
	MaxInFlight int
	// MaxInFlightBytes bounds the payload bytes of the rows claimed and not
	// yet settled, over all sinks (RELAY_MAX_IN_FLIGHT_BYTES): the relay's
	// memory follows it, whatever the payload sizes. A row whose payload is
	// larger than the whole budget is claimed without its payload and
	// dead-lettered as permanent. Default MaxInFlightBytesDefault.
	MaxInFlightBytes int64
	// MaxPayloadBytes, when set, is the most payload bytes of a row
	// (RELAY_MAX_PAYLOAD_BYTES): a larger payload is dead-lettered as
	// permanent without being read, as one over MaxInFlightBytes is.
	// 0: MaxInFlightBytes alone bounds it.
	MaxPayloadBytes int64
	// PollInterval is the pause after a claim that found nothing
	// (RELAY_POLL_INTERVAL); after a claim that found rows but was not full
	// the pause is a tenth of it, and after a full one there is none. One
	// loop of each kind also pauses a tenth of it after an empty claim
	// soon after the last rows found, while a stream flows
	// (claimLoops.eager). Default PollIntervalDefault.
	PollInterval time.Duration
	// IdlePollInterval is the longest pause between the claims of a loop
	// that keeps finding nothing (RELAY_IDLE_POLL_INTERVAL): the pause after
	// an empty claim doubles from PollInterval up to it, and up to ten times
	// it while notifications arrive (Notify). Default PollInterval: no
	// backoff.
	IdlePollInterval time.Duration
	// Lease is how long a claim holds its rows (RELAY_LEASE); deliveries are
	// cut off before it ends. Default LeaseDefault.
	Lease time.Duration
	// Mode is how the schema's rows are delivered (RELAY_MODE): unordered,
	// ordered (a key's rows one at a time, in insert order, across relays)
	// or partitioned (each relay owns a share of 64 buckets, and a key's
	// rows are delivered in insert order, pipelined). Every relay on a
	// schema must run the same mode. Default outbox.ModeUnordered.
	Mode outbox.Mode
	// Notify makes producers' inserts wake the relay (RELAY_NOTIFY): it
	// LISTENs on a dedicated connection, and while it is alive every
	// inserting statement sends one NOTIFY, so that a row is claimed as soon
	// as it commits rather than at the next poll. Polling goes on, and takes
	// over alone when notifications cannot arrive (a transaction-pooling
	// PgBouncer).
	Notify bool
	// Listener, with Notify, is the database's shared listening connection
	// (NewListener), for a process that runs relays on several schemas of
	// one database. Nil: the relay listens on a connection of its own.
	Listener *Listener
	// MaxAttempts is the number of deliveries before a row goes to the dead
	// letters (RELAY_MAX_ATTEMPTS). Default MaxAttemptsDefault.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the retry delay, which doubles from
	// BackoffMin with every attempt, with jitter (RELAY_BACKOFF_MIN,
	// RELAY_BACKOFF_MAX).
	BackoffMin, BackoffMax time.Duration
	// DrainTimeout bounds the wait for in-flight deliveries at shutdown
	// (RELAY_DRAIN_TIMEOUT). Default DrainTimeoutDefault.
	DrainTimeout time.Duration
	// ArchiveRetention and DedupRetention are how long archived rows and
	// delivered idempotency keys are kept (RELAY_ARCHIVE_RETENTION,
	// RELAY_DEDUP_RETENTION); a negative value keeps them forever.
	ArchiveRetention, DedupRetention time.Duration
	// HotRotation is how long each generation of the hot table stays
	// current before the relay rotates it (RELAY_HOT_ROTATION,
	// relay/internal/rotation). Default HotRotationDefault; negative: the
	// relay does not rotate.
	HotRotation time.Duration
	// StallAfter is how long a sink that is available may go without a
	// delivery while every attempt fails before the relay reports itself
	// not ready and logs it. Default StallAfterDefault.
	StallAfter time.Duration
	// StatsInterval is how often the backlog gauges are refreshed from the
	// database. Default StatsIntervalDefault.
	StatsInterval time.Duration
	// CloudEventsSource, when set, adds CloudEvents binary-mode headers to
	// every message (RELAY_CLOUDEVENTS_SOURCE): ce-specversion 1.0, ce-id =
	// idempotency key, ce-type = topic, ce-source = this, ce-time =
	// created_at. Headers the row sets itself are kept.
	CloudEventsSource string
	// TracerProvider, when set, traces deliveries (tracing.go): one CLIENT
	// span "send {sink}" per batch, sink and destination, linked to each
	// row's traceparent. Nil: no spans, and nothing is spent on them.
	TracerProvider trace.TracerProvider
	// TraceInject gives the messages whose row has no traceparent header
	// that of their send span (RELAY_TRACE_INJECT), so that consumers
	// continue the relay's trace. Only with a TracerProvider.
	TraceInject bool
	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the relay's measurements. Default: a private set that
	// is not exported.
	Metrics *Metrics
}

// withDefaults returns c with every zero value replaced by its default.
func (c Config) withDefaults() Config {
	c.Schema = cmp.Or(c.Schema, outbox.DefaultSchema)
	c.ID = cmp.Or(c.ID, defaultID())
	c.Mode = cmp.Or(c.Mode, outbox.ModeUnordered)
	c.Version = cmp.Or(c.Version, "dev")
	if c.DefaultSink == "" && len(c.Sinks) == 1 {
		for name := range c.Sinks {
			c.DefaultSink = name
		}
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, 4*c.BatchSize)
	c.MaxInFlightBytes = cmp.Or(c.MaxInFlightBytes, MaxInFlightBytesDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.IdlePollInterval = max(c.IdlePollInterval, c.PollInterval)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.BackoffMin = cmp.Or(c.BackoffMin, BackoffMinDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	c.ArchiveRetention = cmp.Or(c.ArchiveRetention, ArchiveRetentionDefault)
	c.DedupRetention = cmp.Or(c.DedupRetention, DedupRetentionDefault)
	c.HotRotation = cmp.Or(c.HotRotation, HotRotationDefault)
	c.StallAfter = cmp.Or(c.StallAfter, StallAfterDefault)
	c.StatsInterval = cmp.Or(c.StatsInterval, StatsIntervalDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Metrics = cmp.Or(c.Metrics, NewMetrics())
	return c
}

// defaultID is hostname-pid.
func defaultID() string {
	host, _ := os.Hostname()
	return cmp.Or(host, "relay") + "-" + strconv.Itoa(os.Getpid())
}

// validate reports the first setting out of range, naming the field.
func (c Config) validate() error {
	if err := outbox.ValidateSchema(c.Schema); err != nil {
		return fmt.Errorf("Schema: %w", err)
	}
	if len(c.Sinks) == 0 {
		return errors.New("Sinks: at least one sink is required")
	}
	if _, ok := c.Sinks[c.DefaultSink]; !ok {
		if c.DefaultSink == "" {
			return errors.New("DefaultSink: several sinks are configured, so the default sink for rows without a destination must be named")
		}
		return fmt.Errorf("DefaultSink: %q is not a configured sink", c.DefaultSink)
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 100000:
		return fmt.Errorf("BatchSize: %d is outside 1..100000", c.BatchSize)
	case c.MaxInFlight < c.BatchSize:
		return fmt.Errorf("MaxInFlight: %d is less than BatchSize (%d)", c.MaxInFlight, c.BatchSize)
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("PollInterval: %s is below 1ms", c.PollInterval)
	case c.Lease < 2*time.Second || c.Lease > time.Hour:
		return fmt.Errorf("Lease: %s is outside 2s..1h", c.Lease)
	case c.MaxAttempts < 1:
		return fmt.Errorf("MaxAttempts: %d is below 1", c.MaxAttempts)
	case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("BackoffMin, BackoffMax: need 0 < %s <= %s", c.BackoffMin, c.BackoffMax)
	case c.DrainTimeout < 0:
		return fmt.Errorf("DrainTimeout: %s is negative", c.DrainTimeout)
	case !slices.Contains(outbox.Modes, c.Mode):
		return fmt.Errorf("Mode: %q is not a mode (%s, %s or %s)", c.Mode, outbox.ModeUnordered, outbox.ModeOrdered, outbox.ModePartitioned)
	}
	return nil
}

// DeliveryBudget is how long a delivery may take after its claim: the lease
// minus a fifth of it, the margin for settling, so that a slow
// destination is cut off while the rows are still held. Sink timeouts must
// fit in it.
func DeliveryBudget(lease time.Duration) time.Duration {
	return lease * 4 / 5
}
