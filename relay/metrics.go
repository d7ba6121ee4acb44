package relay

import (
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus collectors, all prefixed outbox_relay_.
// Register them with Register; a Relay updates them as it runs. Every field
// is a collector: Register adds them all.
type Metrics struct {
	Messages      *prometheus.CounterVec
	ClaimDuration prometheus.Histogram
	ClaimRows     prometheus.Histogram
	ClaimErrors   prometheus.Counter
	// ClaimFloorLag, ClaimIndexEntries and ClaimBuffers show the claim's
	// path through the hot table (relay/internal/floor, claimrows.go).
	ClaimFloorLag     prometheus.Gauge
	ClaimIndexEntries prometheus.Histogram
	ClaimBuffers      prometheus.Histogram
	LeaseRescues      prometheus.Counter
	LeaseLost         prometheus.Counter
	InFlight          *prometheus.GaugeVec
	DeliveryLatency   *prometheus.HistogramVec
	DeliverDuration   *prometheus.HistogramVec
	SettleDuration    prometheus.Histogram
	SettleErrors      prometheus.Counter
	SettleIsolated    prometheus.Counter
	// DeadLettersRenumbered counts rows dead-lettered under a new id.
	DeadLettersRenumbered prometheus.Counter
	SinkAvailable         *prometheus.GaugeVec

	Backlog            *prometheus.GaugeVec
	OldestDueAge       prometheus.Gauge
	InBackoff          prometheus.Gauge
	DeadLetters        prometheus.Gauge
	HotTableDeadTuples prometheus.Gauge
	LockWaits          prometheus.Gauge
	StatsErrors        prometheus.Counter
	// StatsCounted counts the refreshes whose counts this relay made; the
	// others used the counts of another relay of the schema
	// (relay/internal/sharedcount). StatsAge is how old the counts the
	// gauges show were when they were set.
	StatsCounted     prometheus.Counter
	StatsAge         prometheus.Gauge
	RetentionDeleted *prometheus.CounterVec
	// HistoryPartitions counts the partitions of the archive and the
	// delivered keys (relay/internal/history).
	HistoryPartitions *prometheus.GaugeVec

	// The hot table's generations (relay/internal/rotation).
	HotGenerations        *prometheus.GaugeVec
	HotGenerationAge      *prometheus.GaugeVec
	HotGenerationRows     *prometheus.GaugeVec
	HotGenerationBytes    *prometheus.GaugeVec
	HotRotations          prometheus.Counter
	HotGenerationsEmptied prometheus.Counter
	HotRowsCarried        prometheus.Counter
	HotRotationBusy       *prometheus.CounterVec

	// The xmin horizon of the database (relay/internal/horizon), by holder.
	OldestSnapshotAge *prometheus.GaugeVec
	OldestXminAge     *prometheus.GaugeVec

	// Ordered mode.
	BlockedKeys   prometheus.Gauge
	WaitingOnKey  prometheus.Gauge
	LanesRepaired prometheus.Counter
	// HeadsClaimsBusy counts the claims of heads not run because another
	// relay's was under way (queryHeadsLockFree).
	HeadsClaimsBusy prometheus.Counter

	// Partitioned mode.
	BucketsOwned    prometheus.Gauge
	BucketChanges   *prometheus.CounterVec
	BucketHandovers prometheus.Histogram
}

// NewMetrics returns unregistered collectors.
func NewMetrics() *Metrics {
	const ns = "outbox_relay"
	latencyBuckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}
	cycleBuckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	return &Metrics{
		Messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "messages_total",
			Help: "Messages settled, by sink and outcome (delivered, retried, dead_lettered, deduplicated, released).",
		}, []string{"sink", "outcome"}),
		ClaimDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "claim_duration_seconds",
			Help:    "Time of one claim statement (SELECT … FOR UPDATE SKIP LOCKED + lease), including empty claims.",
			Buckets: cycleBuckets,
		}),
		ClaimRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "claim_rows",
			Help:    "Rows returned per claim.",
			Buckets: []float64{0, 1, 10, 50, 100, 250, 500, 1000, 2500, 5000},
		}),
		ClaimFloorLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "claim_floor_lag_seconds",
			Help: "How far below the time of its last refresh the claim floor lies: claims walk the due index from the floor, not from its oldest entry. Under a second while claims keep up; it grows while a due row waits unclaimed (its sink closed, its key held up, its lease running) or a young transaction is in progress.",
		}),
		ClaimIndexEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "claim_index_entries",
			Help:    "Index entries of the hot table one claim read, dead ones included (pg_stat_get_xact_tuples_returned), measured on one claim every 10 seconds: what a claim walks through. Growing while the rows claimed stay few means dead entries pile up on the claim's path.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 12),
		}),
		ClaimBuffers: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "claim_buffers",
			Help:    "Buffers of the hot table and its indexes one claim touched (pg_stat_get_xact_blocks_fetched), measured on one claim every 10 seconds.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 12),
		}),
		ClaimErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "claim_errors_total",
			Help: "Claims that failed (database unreachable, backend terminated, …).",
		}),
		LeaseRescues: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "lease_rescues_total",
			Help: "Rows claimed again after a lease expired without being settled (a relay died or stalled).",
		}),
		LeaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "lease_lost_total",
			Help: "Rows this relay could not settle because another claim had taken them over; they are delivered again.",
		}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "in_flight",
			Help: "Rows claimed by this relay and not yet settled, by sink.",
		}, []string{"sink"}),
		DeliveryLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "delivery_latency_seconds",
			Help:    "Time from the row's insert (created_at) to the destination's acknowledgement, by sink.",
			Buckets: latencyBuckets,
		}, []string{"sink"}),
		DeliverDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "deliver_duration_seconds",
			Help:    "Time a sink took for one batch, by sink.",
			Buckets: cycleBuckets,
		}, []string{"sink"}),
		SettleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "settle_duration_seconds",
			Help:    "Time of one settle round trip (archive, requeue, dead-letter statements).",
			Buckets: cycleBuckets,
		}),
		SettleErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "settle_errors_total",
			Help: "Settle round trips that failed (retried, or split when refused because of a row).",
		}),
		SettleIsolated: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "settle_isolated_rows_total",
			Help: "Rows whose settle was refused on their own (a constraint or trigger refuses what they hold): they stay leased and are delivered again; the log names them.",
		}),
		DeadLettersRenumbered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "dead_letters_renumbered_total",
			Help: "Rows dead-lettered under a new id because their id was a dead letter's already.",
		}),
		SinkAvailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "sink_available",
			Help: "1 when the sink can take deliveries (connected, not paused), else 0.",
		}, []string{"sink"}),
		Backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "backlog",
			Help: "Rows due for delivery now (not leased, not in backoff), by destination sink ((unknown) for destinations that name no configured sink); counted up to 1,000,000.",
		}, []string{"sink"}),
		OldestDueAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "oldest_due_age_seconds",
			Help: "How long the oldest due row has been due (0 when none).",
		}),
		InBackoff: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "in_backoff",
			Help: "Rows waiting for a retry after a failed delivery; counted up to 1,000,000.",
		}),
		DeadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "dead_letters",
			Help: "Rows in the dead-letter table; counted up to 1,000,000.",
		}),
		HotTableDeadTuples: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "hot_table_dead_tuples",
			Help: "Dead tuples in the messages table (pg_stat_user_tables): growing means vacuum falls behind and claims slow down.",
		}),
		LockWaits: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "lock_waits",
			Help: "Lock requests on the messages table waiting at the last refresh (claims, producers, vacuum contending).",
		}),
		OldestSnapshotAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "oldest_snapshot_age_seconds",
			Help: "Age of the oldest transaction holding back vacuum in the relay's database, by holder (session: pg_stat_activity.xact_start, " +
				"sessions of other roles only with pg_read_all_stats; prepared: pg_prepared_xacts.prepared); 0 when none. " +
				"While it grows, delivered rows stay behind as dead tuples and claims slow down.",
		}, []string{"holder"}),
		OldestXminAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "oldest_xmin_age_transactions",
			Help: "Transactions since the oldest xmin or xid holding back vacuum in the relay's database (age(xmin)), by holder " +
				"(session, prepared, replication: slots' xmin and standbys' hot_standby_feedback); 0 when none.",
		}, []string{"holder"}),
		StatsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "stats_errors_total",
			Help: "Failed refreshes of the backlog gauges.",
		}),
		StatsCounted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "stats_counted_total",
			Help: "Refreshes of the backlog gauges whose counts this relay made; the others used the counts another relay of the schema made.",
		}),
		StatsAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "stats_age_seconds",
			Help: "How old the counts of the backlog gauges were when they were last set (another relay of the schema may have counted them).",
		}),
		BlockedKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "blocked_keys",
			Help: "Ordered mode: keys whose head (oldest row) failed and waits for its retry, holding up the rows of its key; counted up to 10,000.",
		}),
		WaitingOnKey: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "waiting_on_key",
			Help: "Ordered mode: rows that wait for an older row of their key to be settled (not counted in backlog); counted up to 1,000,000.",
		}),
		LanesRepaired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "lanes_repaired_total",
			Help: "Ordered mode: rows made claimable again that waited behind no older row of their key (a head deleted by hand; expected to stay 0).",
		}),
		HeadsClaimsBusy: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "heads_claims_busy_total",
			Help: "Ordered mode: claims of keys' heads this relay did not run because the schema's lock for them was taken, by another relay's claim of heads under way (one runs at a time per schema).",
		}),
		BucketsOwned: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "buckets_owned",
			Help: "Partitioned mode: buckets this relay owns (of 64).",
		}),
		BucketChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "bucket_changes_total",
			Help: "Partitioned mode: buckets this relay acquired, released (rebalancing or shutting down) and lost (its lease ran out before it renewed it).",
		}, []string{"change"}),
		BucketHandovers: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "bucket_handover_seconds",
			Help:    "Partitioned mode: time from this relay's decision to give a bucket up to its release, spent finishing the bucket's deliveries in flight.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		RetentionDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "retention_deleted_total",
			Help: "Rows removed after their retention, by table (archive, delivered_keys).",
		}, []string{"table"}),
		HistoryPartitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "history_partitions",
			Help: "Partitions of the archive and the delivered keys, by table: retention drops whole partitions, so a count that keeps growing means it cannot (see the log).",
		}, []string{"table"}),
		HotGenerations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "hot_generations",
			Help: "Tables of the hot table's generations by state (current, draining, spare): no spare for long means a draining generation cannot be emptied, and the current one keeps growing.",
		}, []string{"state"}),
		HotGenerationAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "hot_generation_age_seconds",
			Help: "Time since the oldest generation in each state took it: a draining generation this old still holds rows (a row due but never claimed, or leased by a relay that is gone).",
		}, []string{"state"}),
		HotGenerationRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "hot_generation_rows",
			Help: "Rows (live) and dead row versions (dead) of the hot table's generations by state, the statistics' estimates: dead versions go when their generation is emptied, pin or no pin.",
		}, []string{"state", "kind"}),
		HotGenerationBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "hot_generation_bytes",
			Help: "Size of the hot table's generations by state, indexes and TOAST included.",
		}, []string{"state"}),
		HotRotations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "hot_rotations_total",
			Help: "Rotations of the hot table this relay made: a spare became messages.",
		}),
		HotGenerationsEmptied: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "hot_generations_emptied_total",
			Help: "Drained generations of the hot table this relay truncated.",
		}),
		HotRowsCarried: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "hot_rows_carried_total",
			Help: "Waiting rows (delayed, in backoff, waiting behind their key) this relay carried from a draining generation into a younger one.",
		}),
		HotRotationBusy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "hot_rotation_busy_total",
			Help: "Rounds whose step (rotate, empty) gave up because another session held a lock on its table for longer than the rotation waits.",
		}, []string{"step"}),
	}
}

// Register adds every collector to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if err := reg.Register(v.Field(i).Interface().(prometheus.Collector)); err != nil {
			return err
		}
	}
	return nil
}

// Unregister removes every collector from reg, as when the outbox they
// measure is no longer served.
func (m *Metrics) Unregister(reg prometheus.Registerer) {
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		reg.Unregister(v.Field(i).Interface().(prometheus.Collector))
	}
}

// exportSeries creates the series a relay with sinks reports before it has
// anything to count, so that rates and alerts work before the first event.
func (m *Metrics) exportSeries(sinks []string) {
	for _, name := range sinks {
		for _, o := range outcomeLabels {
			m.Messages.WithLabelValues(name, o)
		}
		m.InFlight.WithLabelValues(name)
		m.Backlog.WithLabelValues(name)
	}
	m.Backlog.WithLabelValues(unknownSink)
	for _, h := range horizon.Holders {
		if horizon.TimedHolder(h) {
			m.OldestSnapshotAge.WithLabelValues(h)
		}
		m.OldestXminAge.WithLabelValues(h)
	}
	for _, table := range []string{"archive", "delivered_keys"} {
		m.RetentionDeleted.WithLabelValues(table)
		m.HistoryPartitions.WithLabelValues(table)
	}
}
