package outbox

// Mode is how a schema's relays deliver its rows (RELAY_MODE). Every relay
// on a schema runs the same mode, recorded in the relay_mode table: per-key
// order holds only if every claim of a keyed row follows the mode's rules.
type Mode string

// The delivery modes.
const (
	// ModeUnordered: every relay claims any due row; no order between rows.
	ModeUnordered Mode = "unordered"
	// ModeOrdered: the rows of a key are delivered one at a time, in insert
	// order, across relays; rows without a key are never held up.
	ModeOrdered Mode = "ordered"
	// ModePartitioned: each relay owns a share of 64 buckets (a row's
	// bucket follows from its key) and claims only their rows; a key's rows
	// are delivered in insert order, pipelined.
	ModePartitioned Mode = "partitioned"
)

// Modes lists every delivery mode.
var Modes = []Mode{ModeUnordered, ModeOrdered, ModePartitioned}
