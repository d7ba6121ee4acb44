package relay

import "github.com/outbox-relay/outbox-relay/outbox"

// goldenStatements returns, by directory under testdata/, the statements
// the relay runs for the schema "outbox".
func goldenStatements() map[string]map[string]string {
	u, o, p := renderQueries("outbox", outbox.ModeUnordered), renderQueries("outbox", outbox.ModeOrdered), renderQueries("outbox", outbox.ModePartitioned)
	return map[string]map[string]string{
		"unordered": {
			"claim":        u.claim,
			"settle":       u.settle,
			"archive_only": u.archiveOnly,
		},
		"ordered": {
			"claim_unkeyed":  o.claim,
			"claim_lanes":    o.claimLanes,
			"settle":         o.settle,
			"lanes_prune":    o.pruneLanes,
			"lanes_repair":   o.repairLanes,
			"lanes_backfill": o.backfillLanes,
			"lanes_clear":    o.clearLanes,
			"gauge_backlog":  o.orderedBacklog,
			"gauge_keys":     o.orderedKeys,
		},
		"partitioned": {
			"claim":           p.claimBuckets[0],
			"claim_held_keys": p.claimBuckets[1],
			"settle":          p.settle,
			"archive_only":    p.archiveOnly,
			"buckets_lock":    queryBucketsLock,
			"buckets_renew":   p.bucketsRenew,
			"buckets_live":    p.bucketsLive,
			"buckets_acquire": p.bucketsAcquire,
			"buckets_release": p.bucketsRelease,
			"buckets_reset":   p.bucketsReset,
		},
		"shared": {
			"mode_lock":              queryModeLock,
			"mode_read":              u.modeRead,
			"mode_switch":            u.modeSwitch,
			"mode_switch_lock":       u.modeSwitchLock,
			"mode_apply":             u.applyMode,
			"relays_heartbeat":       u.relaysHeartbeat,
			"relays_restart":         u.relaysRestart,
			"relays_leave":           u.relaysLeave,
			"relays_forget":          u.relaysForget,
			"archive_delete_expired": u.deleteExpiredArchive,
			"keys_delete_expired":    u.deleteExpiredKeys,
			"gauge_backlog":          u.backlog,
			"gauge_table_health":     u.tableHealth,
			"autovacuum":             u.autovacuum,
		},
	}
}
