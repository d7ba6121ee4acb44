package relay

import (
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/buckets"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// goldenStatements returns, by directory under testdata/, the statements
// the relay runs for the schema "outbox", as each mode renders them.
func goldenStatements() map[string]map[string]string {
	relayIn := func(m outbox.Mode) *Relay {
		r, err := New(nil, Config{Mode: m, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
		if err != nil {
			panic(err)
		}
		return r
	}
	u := relayIn(outbox.ModeUnordered).mode.(*unordered)
	ro := relayIn(outbox.ModeOrdered)
	o := ro.mode.(*ordered)
	p := relayIn(outbox.ModePartitioned).mode.(*partitioned)
	q := relayIn(outbox.ModeUnordered).q
	partitioned := map[string]string{
		"claim":           p.claims[0],
		"claim_held_keys": p.claims[1],
		"settle":          p.settle.settle,
		"archive_only":    p.settle.archiveOnly,
	}
	for name, sql := range buckets.Statements(outbox.QuoteSchema("outbox")) {
		partitioned[name] = sql
	}
	return map[string]map[string]string{
		"unordered": {
			"claim":        u.claim,
			"settle":       u.settle.settle,
			"archive_only": u.settle.archiveOnly,
		},
		"ordered": {
			"claim_unkeyed": o.claimUnkeyed,
			"claim_heads":   o.claimHeads,
			"settle":        o.settle.settle,
			"archive_only":  o.settle.archiveOnly,
			"heads_promote": o.settle.then,
			"heads_repair":  o.repairHeads,
			"heads_reset":   switchStatements("outbox", outbox.ModeUnordered, outbox.ModeOrdered)[0],
			"gauge_backlog": o.backlog,
			"gauge_keys":    o.blocked,
			"floor":         ro.q.floor,
			"floor_rescan":  ro.q.floorRescan,
		},
		"partitioned": partitioned,
		"shared": {
			"mode_lock":              q.modeLock,
			"mode_read":              q.modeRead,
			"mode_switch":            q.modeSwitch,
			"mode_switch_lock":       q.modeSwitchLock,
			"mode_apply":             q.modeApply,
			"relays_heartbeat":       q.relaysHeartbeat,
			"relays_sinks":           q.relaysSinks,
			"relays_restart":         q.relaysRestart,
			"relays_leave":           q.relaysLeave,
			"relays_forget":          q.relaysForget,
			"archive_delete_expired": q.deleteExpiredArchive,
			"keys_delete_expired":    q.deleteExpiredKeys,
			"gauge_backlog":          q.backlog,
			"gauge_table_health":     q.tableHealth,
			"autovacuum":             q.autovacuum,
			"gauge_horizon":          q.horizonAge,
			"floor":                  q.floor,
			"floor_rescan":           q.floorRescan,
			"measure_claim":          q.claimStats,
			"plan_claims":            q.claimPlan,
		},
	}
}
