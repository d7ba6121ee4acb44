package outbox

// Reasons a row is in the dead letters (dead_letters.reason).
const (
	// ReasonPermanent: the sink said retrying cannot help (a payload over
	// the broker's limit, a webhook answering 410 or 422, a topic no broker
	// may receive).
	ReasonPermanent = "permanent"
	// ReasonExhausted: RELAY_MAX_ATTEMPTS deliveries failed, or the row
	// outlived that many leases without an outcome.
	ReasonExhausted = "exhausted"
	// ReasonNoSink: the row's destination names no configured sink.
	ReasonNoSink = "no_sink"
	// ReasonCancelled: an operator cancelled the row (outbox-relay cancel).
	ReasonCancelled = "cancelled"
)

// Reasons lists every dead-letter reason, for validating an operator's
// filter.
var Reasons = []string{ReasonPermanent, ReasonExhausted, ReasonNoSink, ReasonCancelled}
