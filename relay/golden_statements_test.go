package relay

import (
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/buckets"
	"github.com/outbox-relay/outbox-relay/relay/internal/floor"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
	"github.com/outbox-relay/outbox-relay/relay/internal/sampler"
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
	ru := relayIn(outbox.ModeUnordered)
	reg, ret, g := ru.registry.q, ru.retention, ru.gauges
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
			"heads_lock":    queryHeadsLockFree,
			"settle":        o.settle.settle,
			"archive_only":  o.settle.archiveOnly,
			"heads_promote": o.settle.then,
			"heads_repair":  o.repairHeads,
			"heads_reset":   switchStatements("outbox", outbox.ModeUnordered, outbox.ModeOrdered)[0],
			"gauge_backlog": o.backlog,
			"gauge_keys":    o.blocked,
			"floor":         floor.Render(outbox.QuoteSchema("outbox"), o.oldestClaimable()).Refresh,
			"floor_rescan":  floor.Render(outbox.QuoteSchema("outbox"), o.oldestClaimable()).Rescan,
		},
		"partitioned": partitioned,
		"shared": {
			"mode_lock":          reg.modeLock,
			"mode_read":          reg.modeRead,
			"mode_switch":        reg.modeSwitch,
			"mode_switch_lock":   reg.modeSwitchLock,
			"mode_apply":         reg.modeApply,
			"relays_heartbeat":   reg.relaysHeartbeat,
			"relays_sinks":       reg.relaysSinks,
			"relays_restart":     reg.relaysRestart,
			"relays_leave":       reg.relaysLeave,
			"relays_forget":      ret.relaysForget,
			"gauge_backlog":      ru.engine.backlog,
			"gauge_table_health": g.tableHealth,
			"autovacuum":         ru.autovacuum,
			"gauge_horizon":      horizon.Statements()["gauge_horizon"],
			"floor":              floor.Render(outbox.QuoteSchema("outbox"), u.oldestClaimable()).Refresh,
			"floor_rescan":       floor.Render(outbox.QuoteSchema("outbox"), u.oldestClaimable()).Rescan,
			"measure_claim":      sampler.Statement(outbox.QuoteSchema("outbox")),
			"plan_claims":        ru.engine.claims.plan,
			"plan_floor":         queryClaimPlanPerExecution,
			"plan_settles":       querySettlePlan,
		},
	}
}
